"""examples/train_own_task.py (chapter 18 as a script) runs, and chapter 18's stored runs are what
tools/own_task_runs.py makes of it."""

import importlib.util
import json
from importlib import resources
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytest.importorskip("trl")


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_script_runs_a_few_steps_with_and_without_the_fix(tmp_path, capsys):
    script = load(ROOT / "examples" / "train_own_task.py", "train_own_task")
    out = tmp_path / "run.json"
    record = script.main(["--sft-steps", "3", "--steps", "2", "--eval-every", "1",
                          "--out", str(out)])
    assert json.loads(out.read_text()) == record
    assert record["config"] == dict(kind="gpt2", seed=0, sft_steps=3, noise=0.3, steps=2,
                                    fix=True)
    assert record["position_gap"] > 0.1 and record["position_gap_fixed"] == 0.0
    assert [step for step, _ in record["held_out"]] == [0, 1, 2]
    assert set(record["held_out"][0][1]) == {"2", "3", "4"}
    assert len(record["logs"]["reward"]) == 2
    text = capsys.readouterr().out
    assert "position fix on" in text and ", 0 with the fix" in text and "exact match   2" in text
    assert set(record["dead_predicted"]) == {"2", "3", "4"}
    assert all(0 <= v <= 1 for v in record["dead_predicted"].values())


def test_stored_runs_are_the_tools_configurations():
    tool = load(ROOT / "tools" / "own_task_runs.py", "own_task_runs")
    runs = json.loads((resources.files("grpo_core") / "data" / "own_task.json").read_text())
    assert set(runs) == set(tool.CONFIGS)
    for name, config in tool.CONFIGS.items():
        assert set(runs[name]) == {str(s) for s in tool.SEEDS}
        for seed, record in runs[name].items():
            assert record["config"] == config | dict(seed=int(seed), steps=tool.STEPS)
            assert len(record["logs"]["reward"]) == tool.STEPS
            assert [step for step, _ in record["held_out"]] == [0, 20, 40, 60]
    # the broken and the fixed GPT-2 runs start from the same warm starts
    for seed in runs["fixed"]:
        assert runs["broken"][seed]["pass_probability"] == runs["fixed"][seed]["pass_probability"]
