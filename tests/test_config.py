"""GRPOConfig: TRL 1.16's names and defaults, one validation, the bridge to trl.GRPOConfig."""

import dataclasses
import importlib.util
import tempfile
import warnings
from pathlib import Path

import pytest

import grpo_core as gc
from grpo_core import config as C

# the installed TRL 1.16's own source (a wheel installs its .py files)
_TRL = importlib.util.find_spec("trl")
TRL_SRC = Path(_TRL.origin).parent / "trainer" / "grpo_config.py" if _TRL else Path("-")


def test_trl_fields_have_trls_defaults():
    """Every TRL knob's default is trl.GRPOConfig's (read from the installed TRL 1.16)."""
    trl = pytest.importorskip("trl")
    theirs = {f.name: f.default for f in dataclasses.fields(trl.GRPOConfig)}
    ours = [f for f in dataclasses.fields(gc.GRPOConfig) if f.metadata["trl"] is not None]
    assert len(ours) == 21 + 16  # + the chapter-17 block
    for f in ours:
        assert f.name in theirs, f.name
        assert f.default == theirs[f.name], (f.name, f.default, theirs[f.name])
        assert f.metadata["trl"] == repr(theirs[f.name])


@pytest.mark.skipif(not TRL_SRC.exists(), reason="trl is not installed")
def test_cited_lines_define_the_field():
    """Each field's metadata names the line of grpo_config.py (or TrainingArguments) that
    defines it; the book's own knobs say "book only"."""
    lines = TRL_SRC.read_text().splitlines()
    for f in dataclasses.fields(gc.GRPOConfig):
        src = f.metadata["source"]
        assert f.metadata["help"] and f.metadata["chapters"]
        assert all(isinstance(c, int) and 1 <= c <= 17 for c in f.metadata["chapters"])
        if f.metadata["trl"] is None:
            assert src == "book only"
        elif src.startswith("trl/trainer/grpo_config.py"):
            n = f.metadata["line"]
            assert f"line {n}" in src
            assert lines[n - 1].startswith(f"    {f.name}:"), (f.name, lines[n - 1])


def test_cited_training_arguments_lines_define_the_field():
    """The TrainingArguments fields cite the line of transformers' training_args.py."""
    transformers = pytest.importorskip("transformers")
    src = Path(transformers.__file__).parent / "training_args.py"
    lines = src.read_text().splitlines()
    cited = [f for f in dataclasses.fields(gc.GRPOConfig)
             if "TrainingArguments" in f.metadata["source"]]
    assert {f.name for f in cited} == {"per_device_train_batch_size", "max_steps", "adam_beta2",
                                      "seed"}
    for f in cited:
        assert lines[f.metadata["line"] - 1].startswith(f"    {f.name}:"), f.name


# The chapters each knob's row of the tables in chapters 9 and 15 names (pinned: the tables are
# generated from this metadata, so a change here is a change of the book's text).
CHAPTERS = {
    "num_generations": (3, 5, 11), "per_device_train_batch_size": (9, 15), "max_steps": (4,),
    "learning_rate": (4, 10, 15), "adam_beta2": (4, 14), "seed": (15,), "beta": (6, 12),
    "num_iterations": (10,), "epsilon": (10,), "epsilon_high": (10,), "loss_type": (13,),
    "importance_sampling_level": (13,), "scale_rewards": (7, 11, 14),
    "use_bias_correction_kl": (12,), "max_completion_length": (13,),
    "mask_truncated_completions": (13,), "temperature": (15,), "sync_ref_model": (6, 9),
    "steps_per_generation": (13, 16, 17), "use_vllm": (16, 17),
    "ref_model_sync_steps": (6, 9), "ref_model_mixup_alpha": (6, 9), "kind": (2, 3, 7),
    "kl_estimator": (6, 12), "kl_in": (6, 9), "dynamic_sampling": (11,), "max_redraws": (11,),
    "use_critic": (4, 8), "train_critic": (4, 8), "critic_lr": (4,), "critic_seed": (4,),
    "float32_advantages": (3, 12)}


CHAPTER_17_ONLY = ("reward_weights", "multi_objective_aggregation", "vllm_importance_sampling_mode",
                   "vllm_importance_sampling_clip_max", "vllm_importance_sampling_clip_min")


def test_each_knob_names_the_chapters_that_teach_it():
    block = dict.fromkeys(C.LOSS_KNOBS + CHAPTER_17_ONLY, (17,))  # TRL's other knobs
    assert {f.name: f.metadata["chapters"] for f in dataclasses.fields(gc.GRPOConfig)} == \
        CHAPTERS | block
    book = Path(__file__).parents[1] / "book"
    for chapters in CHAPTERS.values():  # every chapter named exists
        for c in chapters:
            assert list(book.glob(f"{c:02d}_*.ipynb")), c


def test_trl_kwargs_build_a_trl_config_that_trains_as_the_book():
    trl = pytest.importorskip("trl")
    cfg = gc.GRPOConfig(learning_rate=0.05, max_steps=300, beta=0.02, num_iterations=2,
                        epsilon_high=0.28, per_device_train_batch_size=64)
    kw = cfg.trl_kwargs()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # no deprecated name is passed
        t = trl.GRPOConfig(output_dir=tempfile.mkdtemp(), **kw)
    for name in ("num_generations", "learning_rate", "beta", "num_iterations", "epsilon_high",
                 "loss_type", "scale_rewards", "per_device_train_batch_size"):
        assert getattr(t, name) == getattr(cfg, name), name
    # the book's loop counts generation batches, TRL optimizer steps: mu of them per batch
    assert t.max_steps == 600 == cfg.max_steps * cfg.num_iterations
    # the loop TRL runs is the book's: constant LR, no clipping, no bf16, no checkpointing,
    # one optimiser step per generated batch, a log every step
    assert t.lr_scheduler_type == "constant" and t.max_grad_norm == 0.0 and t.bf16 is False
    assert t.gradient_checkpointing is False and t.activation_checkpointing is False
    assert t.steps_per_generation == 1 and t.generation_batch_size == 64
    assert t.gradient_accumulation_steps == 1
    assert t.logging_steps == 1 and t.save_strategy == "no" and t.use_cpu is True
    assert t.weight_decay == 0.0 and t.optim == "adamw_torch"
    # without the overrides TRL would differ on each of them
    d = trl.GRPOConfig(output_dir=tempfile.mkdtemp(), use_cpu=True)
    assert d.lr_scheduler_type != "constant" and d.max_grad_norm == 1.0
    assert d.logging_steps == 10 and d.activation_checkpointing is True


@pytest.mark.parametrize("knob", [{"kl_estimator": "exact"}, {"kl_estimator": "k1"},
                                  {"kl_in": "reward"}, {"dynamic_sampling": True},
                                  {"use_critic": True},
                                  {"kind": "group_norm", "scale_rewards": None}])
def test_trl_kwargs_refuse_book_only_knobs(knob):
    name = next(iter(knob))
    with pytest.raises(ValueError, match=f"{name}=.*no TRL 1.16 equivalent"):
        gc.GRPOConfig(**knob).trl_kwargs()


def test_trl_kwargs_refuse_per_run_values_and_toy_only_sizes():
    with pytest.raises(ValueError, match="per-run values given for num_generations"):
        gc.GRPOConfig(num_generations=(4, 8), per_device_train_batch_size=None).trl_kwargs()
    with pytest.raises(ValueError, match="per_device_train_batch_size=None"):
        gc.GRPOConfig(per_device_train_batch_size=None).trl_kwargs()
    with pytest.raises(ValueError, match="max_completion_length=None"):
        gc.GRPOConfig(max_completion_length=None).trl_kwargs()
    # tuning knobs of a book-only feature that is off are no behaviour: accepted
    assert gc.GRPOConfig(max_redraws=3, critic_lr=0.1).trl_kwargs()["num_generations"] == 8


def test_loss_kwargs_thread_each_knob_to_grpo_loss():
    cfg = gc.GRPOConfig(beta=0.3, epsilon=0.1, epsilon_high=0.28, loss_type="grpo",
                        importance_sampling_level="sequence", max_completion_length=7,
                        kl_estimator="k2", use_bias_correction_kl=False)
    assert cfg.loss_kwargs() == {"beta": 0.3, "epsilon": 0.1, "epsilon_high": 0.28,
                                 "loss_type": "grpo", "importance_sampling_level": "sequence",
                                 "max_completion_length": 7, "kl_estimator": "k2",
                                 "use_bias_correction_kl": False,
                                 **{k: getattr(cfg, k) for k in C.LOSS_KNOBS}}  # chapter 17's knobs
    # a KL that grpo_loss does not carry: in the reward, or the toy's exact KL
    for other in ({"kl_in": "reward"}, {"kl_estimator": "exact"}):
        kw = dataclasses.replace(cfg, **other).loss_kwargs()
        assert kw["beta"] == 0.0 and kw["kl_estimator"] == "k3"
    with pytest.raises(ValueError, match="per-run values given for beta"):
        gc.GRPOConfig(beta=(0.0, 0.1)).loss_kwargs()


@pytest.mark.parametrize("knobs, match", [
    ({"epsilon": 0.0}, "epsilon"), ({"epsilon_high": -1.0}, "epsilon_high"),
    ({"epsilon_high": 0.0}, "epsilon_high"), ({"num_iterations": 0}, "num_iterations"),
    ({"learning_rate": 0.0}, "learning_rate"), ({"max_steps": -2}, "max_steps"),
    ({"num_generations": 0}, "num_generations"), ({"beta": -0.1}, "beta"),
    ({"beta": (0.1, -0.1)}, "beta"), ({"loss_type": "ppo"}, "loss_type"),
    ({"loss_type": ("dapo", "x")}, "loss_type"),
    ({"importance_sampling_level": "word"}, "importance_sampling_level"),
    ({"scale_rewards": "median"}, "scale_rewards"), ({"kl_estimator": "k4"}, "kl_estimator"),
    ({"kl_in": "prompt"}, "kl_in"), ({"kind": "median", "scale_rewards": None}, "kind"),
    ({"adam_beta2": 1.0}, "adam_beta2"), ({"temperature": 0.0}, "temperature"),
    ({"max_completion_length": 0}, "max_completion_length"), ({"seed": -1}, "seed"),
    ({"ref_model_sync_steps": 0}, "ref_model_sync_steps"),
    ({"ref_model_mixup_alpha": 1.5}, "ref_model_mixup_alpha"),
    ({"ref_model_mixup_alpha": -0.5}, "ref_model_mixup_alpha"),
    ({"max_redraws": 0}, "max_redraws"), ({"critic_lr": 0.0}, "critic_lr"),
    ({"critic_seed": -1}, "critic_seed"), ({"use_bias_correction_kl": "yes"}, "use_bias"),
    ({"mask_truncated_completions": "yes"}, "mask_truncated"),
    ({"kind": "group_norm"}, "exclusive"), ({"scale_rewards": None}, "must be set"),
    ({"kind": ("group", None), "scale_rewards": None}, "every run"),
    ({"num_generations": 1}, "num_generations >= 2"),
    ({"num_generations": 3}, "must divide"),
    ({"num_generations": (2, 3), "per_device_train_batch_size": 4}, "must divide"),
    ({"use_critic": True, "kl_in": "reward"}, "use_critic"),
    ({"per_device_train_batch_size": 0}, "per_device_train_batch_size"),
])
def test_one_validation_names_the_bad_knob(knobs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        gc.GRPOConfig(**knobs)


def test_valid_corners_are_accepted():
    """The boundaries of each check: the smallest legal value passes."""
    for knobs in ({"max_steps": -1}, {"max_steps": 0}, {"beta": 0.0}, {"adam_beta2": 0.0},
                  {"ref_model_mixup_alpha": 0.0}, {"ref_model_mixup_alpha": 1.0},
                  {"seed": 0}, {"max_redraws": 1}, {"critic_seed": 0},
                  {"num_generations": 1, "kind": "group", "scale_rewards": None,
                   "per_device_train_batch_size": None},
                  {"num_generations": 2, "per_device_train_batch_size": 2},
                  {"num_generations": 1, "kind": "group", "scale_rewards": None,
                   "per_device_train_batch_size": 1},
                  {"max_completion_length": 1, "ref_model_sync_steps": 1, "num_iterations": 1},
                  {"use_critic": True},
                  # TRL: only the generation batch holds whole groups (grpo_config.py 1131-1135)
                  {"per_device_train_batch_size": 2, "steps_per_generation": 4},
                  {"per_device_train_batch_size": 1, "steps_per_generation": 8}):
        gc.GRPOConfig(**knobs)
    with pytest.raises(ValueError, match="must divide the generation batch"):
        gc.GRPOConfig(per_device_train_batch_size=2, steps_per_generation=3)


def test_field_table_rows():
    rows = C.field_table({"learning_rate": 0.05})
    assert [r["name"] for r in rows] == [f.name for f in dataclasses.fields(gc.GRPOConfig)]
    lr = next(r for r in rows if r["name"] == "learning_rate")
    assert lr["value"] == 0.05 and lr["trl"] == "1e-06" and lr["chapters"] == (4, 10, 15)
    assert "line 423" in lr["source"] and lr["line"] == 423
    book = {r["name"]: r["value"] for r in rows if r["trl"] == "book only"}  # printed in ch. 9
    assert book == {"kind": None, "kl_estimator": "k3", "kl_in": "loss",
                    "dynamic_sampling": False, "max_redraws": 8, "use_critic": False,
                    "train_critic": True, "critic_lr": 0.05, "critic_seed": 0,
                    "float32_advantages": False}
    kind = next(r for r in rows if r["name"] == "kind")
    assert kind["trl"] == "book only" and kind["value"] is None
