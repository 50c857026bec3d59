"""grpo_core.distributed (chapter 19): TRL's normalisers across ranks, in one process.

Oracles: torch autograd on the concatenated batch (what one process computes), and, for the LoRA
test, TRL 1.16's own GRPOTrainer with a peft adapter (one process; the 2-process launch itself
is chapter 19's, checked by its hidden cells under nbval: one torchrun launch in the suite).
"""

import ast
import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from grpo_core import distributed as D
from grpo_core import loss as L

ROOT = Path(__file__).resolve().parent.parent
ARGS = SimpleNamespace(beta=0.0, epsilon=0.2, epsilon_high=None, loss_type="dapo",
                       importance_sampling_level="token", max_completion_length=5,
                       use_bias_correction_kl=True)


def batch(rows, seed, width=5, prompt_width=4):
    """A micro-batch as TRL's _compute_loss gets it: ids, masks (completions of 1..width tokens),
    advantages, a stale pi_old."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, width + 1, (rows,), generator=g)
    mask = (torch.arange(width) < lengths[:, None]).long()
    ids = torch.randint(11, mask.shape, generator=g)
    return {"prompt_ids": torch.randint(10, (rows, prompt_width), generator=g),
            "prompt_mask": torch.ones(rows, prompt_width, dtype=torch.long),
            "completion_ids": torch.where(mask == 1, ids, 11),
            "completion_mask": mask,
            "advantages": torch.randn(rows, generator=g, dtype=torch.float64),
            "old_per_token_logps": -torch.rand(rows, width, generator=g, dtype=torch.float64)}


def logp_of(theta, b):
    """log-probs (B, T) that depend on a parameter, as a model's would (float64)."""
    x = torch.nn.functional.one_hot(b["completion_ids"], 12).to(torch.float64)
    return torch.log_softmax(x @ theta, -1)[..., 0] - 0.1 * b["prompt_ids"].sum(1, keepdim=True)


def grad(loss, theta):
    return torch.autograd.grad(loss, theta)[0]


@pytest.mark.parametrize("W,gas", [(2, 1), (2, 2), (3, 2), (1, 3)])
def test_ddp_mean_of_rank_losses_is_the_concatenated_batch_gradient(W, gas):
    """TRL's dapo normalisers: DDP's mean over W ranks of each rank's summed micro-batch gradients
    is the gradient of grpo_loss on the whole generation batch in one process; dividing by each
    micro-batch's own tokens (bnpo's aggregation) is not, once lengths differ."""
    theta = torch.randn(12, 3, dtype=torch.float64, requires_grad=True)
    micro = [[batch(6, 100 * r + k) for k in range(gas)] for r in range(W)]  # (rank, micro-batch)
    n_items = sum(int(b["completion_mask"].sum()) for rank in micro for b in rank)
    trainer = SimpleNamespace(current_gradient_accumulation_steps=gas,
                              accelerator=SimpleNamespace(num_processes=W),
                              args=SimpleNamespace(steps_per_generation=gas))
    g_ddp = sum(grad(D.rank_loss(logp_of(theta, b), b | {"num_items_in_batch": n_items}, ARGS,
                                 **D.normalisers(trainer, {"num_items_in_batch": n_items})),
                     theta)
                for rank in micro for b in rank) / W
    whole = D.concatenate([b for rank in micro for b in rank], pad_id=11)
    g_one = grad(D.rank_loss(logp_of(theta, whole), whole, ARGS), theta)
    assert D.relative(g_one, g_ddp) < 1e-13  # not torch.testing: it imports torch.distributed
    g_own = sum(grad(D.rank_loss(logp_of(theta, b), b, ARGS) / gas, theta)
                for rank in micro for b in rank) / W
    if W * gas > 1:
        assert D.relative(g_one, g_own) > 1e-3


def test_two_generation_batches_in_one_step_weigh_their_tokens_differently():
    """With gradient_accumulation_steps 2 and steps_per_generation 1 an optimizer step holds two
    generation batches, each divided by its own token count N: a token of the batch with fewer
    tokens weighs N_big / N_small times more, and the step is not the concatenated batch's."""
    theta = torch.randn(12, 3, dtype=torch.float64, requires_grad=True)
    a, b = batch(8, 1), batch(8, 4)
    n_a, n_b = int(a["completion_mask"].sum()), int(b["completion_mask"].sum())
    assert n_a != n_b
    norm = dict(gradient_accumulation_steps=2, num_processes=1, steps_per_generation=1)
    g_step = sum(grad(D.rank_loss(logp_of(theta, x), x, ARGS, num_items_in_batch=n, **norm),
                      theta) for x, n in ((a, n_a), (b, n_b)))
    whole = D.concatenate([a, b], pad_id=11)
    g_one = grad(D.rank_loss(logp_of(theta, whole), whole, ARGS), theta)
    assert D.relative(g_step, g_one) > 1e-3
    # each token of a weighs 1 / (2 n_a), of b 1 / (2 n_b): the per-token weights, exactly
    ones = {"advantages": torch.ones(8, dtype=torch.float64)}
    w = [grad(D.rank_loss(logp_of(theta, x), x | ones, ARGS, num_items_in_batch=n, **norm), theta)
         for x, n in ((a, n_a), (b, n_b))]
    assert w[0].abs().max() > 0
    one = [grad(D.rank_loss(logp_of(theta, x), x | ones, ARGS, num_items_in_batch=n), theta)
           for x, n in ((a, n_a), (b, n_b))]
    assert D.relative(one[0] / 2, w[0]) < 1e-14 and D.relative(one[1] / 2, w[1]) < 1e-14


def test_concatenate_pads_prompts_left_and_completions_right():
    a, b = batch(2, 0, width=3, prompt_width=2), batch(3, 1, width=5, prompt_width=4)
    whole = D.concatenate([a, b], pad_id=11)
    assert whole["prompt_ids"].shape == (5, 4) and whole["completion_ids"].shape == (5, 5)
    assert (whole["prompt_mask"][:2, :2] == 0).all() and (whole["prompt_ids"][:2, :2] == 11).all()
    assert torch.equal(whole["prompt_ids"][:2, 2:], a["prompt_ids"])
    assert torch.equal(whole["completion_ids"][:2, :3], a["completion_ids"])
    assert (whole["completion_mask"][:2, 3:] == 0).all()
    assert (whole["old_per_token_logps"][:2, 3:] == 0).all()
    assert torch.equal(whole["advantages"], torch.cat([a["advantages"], b["advantages"]]))
    assert "ref_per_token_logps" not in whole and "num_items_in_batch" not in whole
    ref = {"ref_per_token_logps": -torch.ones(2, 3, dtype=torch.float64)}
    padded = D.concatenate([a | ref, b | {"ref_per_token_logps": -torch.ones(3, 5).double()}],
                           pad_id=11)
    assert (padded["ref_per_token_logps"][:2, 3:] == 0).all()  # pi_ref's log-probs padded with 0
    assert (padded["ref_per_token_logps"][:2, :3] == -1).all()


def test_rank_loss_is_grpo_loss_with_the_args_knobs():
    b = batch(4, 3) | {"ref_per_token_logps": -torch.rand(4, 5, dtype=torch.float64)}
    args = SimpleNamespace(**(vars(ARGS) | dict(beta=0.04, epsilon_high=0.28, loss_type="bnpo")))
    logp = -torch.rand(4, 5, dtype=torch.float64)
    ours = D.rank_loss(logp, b, args, gradient_accumulation_steps=2)
    theirs = L.grpo_loss(logp, b["old_per_token_logps"], b["ref_per_token_logps"],
                         b["advantages"], b["completion_mask"].double(), beta=0.04,
                         epsilon_high=0.28, loss_type="bnpo", max_completion_length=5,
                         gradient_accumulation_steps=2)
    assert ours.item() == theirs.item()
    assert ours.item() != D.rank_loss(logp, b, args).item()  # the normaliser is passed on


def test_launch_runs_torchrun_from_this_python_with_one_thread(monkeypatch):
    seen = {}

    def fake_run(cmd, env, capture_output, text, timeout):
        seen.update(cmd=cmd, env=env, timeout=timeout)
        return SimpleNamespace(returncode=seen.get("rc", 0), stdout="rank 0 says hi\n",
                               stderr="...\nValueError: bad batch\n")

    monkeypatch.setattr(D.subprocess, "run", fake_run)
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert D.launch("train.py", "--out", 3) == "rank 0 says hi\n"
    assert seen["cmd"] == [sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node", "2", "train.py", "--out", "3"]
    assert seen["env"]["OMP_NUM_THREADS"] == "1" and seen["timeout"] == 900
    assert D.torchrun_command("train.py")[3] == "2"  # two ranks unless told
    assert D.torchrun_command("train.py", nproc=4)[:5] == [
        "torchrun", "--standalone", "--nproc_per_node", "4", "train.py"]
    seen["rc"] = 1
    with pytest.raises(RuntimeError, match="exited with 1(.|\n)*bad batch"):
        D.launch("train.py")


def test_example_script_is_found_beside_the_package_or_cloned(monkeypatch, tmp_path):
    assert D.example_script("grpo_two_processes.py") == ROOT / "examples/grpo_two_processes.py"
    # installed alone from git (Colab): clone the recorded repository and revision
    origin = {"url": "https://example.org/book.git", "vcs_info": {"requested_revision": "v1"}}
    monkeypatch.setattr(D, "__file__", str(tmp_path / "site" / "grpo_core" / "distributed.py"))
    monkeypatch.setattr("importlib.metadata.distribution",
                        lambda name: SimpleNamespace(read_text=lambda f: json.dumps(origin)))
    monkeypatch.setattr("tempfile.gettempdir", lambda: str(tmp_path))
    calls = []
    monkeypatch.setattr(D.subprocess, "run", lambda cmd, check: calls.append(cmd))
    path = D.example_script("x.py")
    assert path == tmp_path / "grpo-book-repository" / "examples" / "x.py"
    assert calls == [["git", "clone", "--quiet", "--depth", "1", "--branch", "v1",
                      "https://example.org/book.git", str(tmp_path / "grpo-book-repository")]]
    origin.pop("vcs_info")
    (tmp_path / "grpo-book-repository").mkdir()
    with pytest.raises(FileNotFoundError, match="clone of the book"):
        D.example_script("x.py")


def test_the_module_imports_no_trl_package_at_import_time():
    """Only its functions import accelerate, transformers and trl: grpo_core works without them."""
    tree = ast.parse((ROOT / "grpo_core" / "distributed.py").read_text(encoding="utf-8"))
    top = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    names = {a.name.split(".")[0] for n in top if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in top if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= {"__future__", "json", "os", "subprocess", "sys", "collections", "pathlib",
                     "typing", "torch"}, names


def load_example():
    spec = importlib.util.spec_from_file_location("grpo_two_processes",
                                                  ROOT / "examples" / "grpo_two_processes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_lora_trains_only_the_adapters_against_the_model_with_them_disabled():
    """The example's LoRA run in one process (TRL 1.16 + peft): the trainable parameters are the
    adapters, r x (in + out) per adapted matrix; no second model for pi_ref; TRL's reference
    log-probs equal the base model's to the last bit, while the policy's have moved; the base
    weights never change; TRL's loss is still grpo_loss (beta > 0: the gradient to ~1e-8,
    TRL's float32 graph of the KL term differs, as in tests/test_trl_bridge.py)."""
    pytest.importorskip("peft")
    from grpo_core import tiny_lm as T
    from grpo_core import trl_bridge as B

    example = load_example()
    train, _ = T.split_prompts(0)
    warm = T.warm_start(0, train_prompts=train, steps=40)  # any weights do: a short warm start
    trainer = example.trainer_for("lora", warm, train, optimizer_steps=4, seed=0)
    checks = D.DistributedChecks(trainer, steps=4, reference=B.to_gpt2(warm))
    trainer.train()
    record = checks.results()
    model, lora = trainer.model, example.LORA
    adapted = {n: m for n, m in B.to_gpt2(warm).named_modules()
               if n.split(".")[-1] in lora.target_modules}
    assert len(adapted) == 8  # c_attn, attn.c_proj, c_fc, mlp.c_proj in each of 2 blocks
    expected = sum(lora.r * sum(m.weight.shape) for m in adapted.values())
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert sum(p.numel() for p in trainable.values()) == expected == 3072
    assert all(".lora_A." in n or ".lora_B." in n for n in trainable)
    assert trainer.ref_model is None and trainer.args.beta == 0.04
    generations = record["generations"][0]  # one rank
    assert len(generations) == 2  # mu = 2: two generation batches in 4 optimizer steps
    assert all(g["ref_vs_reference"] == 0.0 for g in generations)
    assert generations[0]["policy_vs_ref"] == 0.0  # lora_B starts at 0: the base model
    assert generations[1]["policy_vs_ref"] > 1e-3  # two Adam steps later it has moved
    assert max(c["loss_diff"] for c in record["losses"]) <= 1e-8
    assert max(c["grad_diff"] for c in record["losses"]) <= 1e-7
    grads = record["grads"]  # every optimizer step checked, on rank 0 (the only rank here)
    assert [g["step"] for g in grads] == [0, 1, 2, 3] and all(g["ranks_agree"] == 0 for g in grads)
    assert all(g["one_process"] <= 1e-6 and g["normalisers"] <= 1e-6 for g in grads)
    base = dict(B.to_gpt2(warm).named_parameters())
    for name, p in model.named_parameters():
        if not p.requires_grad:
            key = name.replace("base_model.model.", "").replace(".base_layer", "")
            assert torch.equal(p, base[key]), name
    assert all(p.abs().max() > 0 for n, p in trainable.items() if ".lora_B." in n)


def test_show_script_shows_definitions_with_their_comments_without_running_the_file(tmp_path):
    from grpo_core import viz

    script = tmp_path / "s.py"
    script.write_text("import nothing_that_exists\n\n# the table\n# of runs\n"
                      "RUNS = {\n    'a': 1,\n}\nX = 2\n\n\n@staticmethod\ndef f(x):\n"
                      "    return x\n", encoding="utf-8")
    shown = viz.show_script(script, "f", "RUNS").data
    assert shown == ("```python\n@staticmethod\ndef f(x):\n    return x\n\n\n# the table\n"
                     "# of runs\nRUNS = {\n    'a': 1,\n}\n```")
    with pytest.raises(KeyError, match="defines no g"):
        viz.show_script(script, "X", "g")
    example = viz.show_script(ROOT / "examples" / "grpo_two_processes.py", "LORA").data
    assert "LoraConfig(r=4" in example
