"""TRL's ``GRPOTrainer`` over several processes, checked on every rank against ``grpo_loss``.

``torchrun --standalone --nproc_per_node W script.py`` starts W copies of a training script, the
*ranks*. Each builds the same ``GRPOTrainer``; each generates and scores its slice of every
generation batch (TRL gathers the rewards, so a group is one group whichever ranks its
completions sit on); ``DistributedDataParallel`` averages the ranks' gradients (an all-reduce)
before every optimizer step. TRL 1.16 divides each rank's ``"dapo"`` loss by the token count of
the whole generation batch / W x ``gradient_accumulation_steps`` / ``steps_per_generation``
(``trl/trainer/grpo_trainer.py`` lines 2498, 3168-3173), so that this average is the gradient of
the concatenated batch in one process (DeepSeekMath, arXiv 2402.03300 §4.1, over a batch split
across machines). This module checks that on a real run:

    launch            torchrun from Python (a notebook cell, a test), one thread per process
    normalisers       TRL's four normaliser arguments of ``grpo_loss`` on this rank
    rank_loss         ``grpo_loss`` on one rank's micro-batch, TRL's knobs and normalisers
    concatenate       every rank's micro-batches as one padded batch
    DistributedChecks what each rank generated, its loss against ``rank_loss``, and the
                      all-reduced gradient against the concatenated batch's

``torch.distributed``, ``accelerate`` and ``transformers`` are imported inside the functions that
use them: ``import grpo_core`` never needs them. Taught in chapter 19.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from . import loss as _loss

if TYPE_CHECKING:  # annotations only
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer

# What a micro-batch's check keeps of TRL's inputs (``_compute_loss``'s dict).
KEPT = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages",
        "num_items_in_batch", "old_per_token_logps", "ref_per_token_logps")


# --- launching -----------------------------------------------------------------------------------

def torchrun_command(script: str | os.PathLike, *args: Any, nproc: int = 2) -> list[str]:
    """The command that starts ``nproc`` ranks of ``script`` on this machine:
    ``torchrun --standalone --nproc_per_node nproc script args...`` (``--standalone``: a free
    local port, nothing to configure). Chapter 19."""
    return ["torchrun", "--standalone", "--nproc_per_node", str(nproc), str(script),
            *map(str, args)]


def launch(script: str | os.PathLike, *args: Any, nproc: int = 2, timeout: float = 900) -> str:
    """Run :func:`torchrun_command` and return what the ranks printed (stdout; by convention only
    rank 0 prints). ``torchrun`` is run as ``python -m torch.distributed.run`` from this Python,
    so the ranks use this environment, with ``OMP_NUM_THREADS=1`` (W ranks of several threads
    each would oversubscribe W cores). Raises RuntimeError with the end of stderr when a rank
    fails (torchrun then stops the others). Chapter 19."""
    cmd = torchrun_command(script, *args, nproc=nproc)
    cmd[:1] = [sys.executable, "-m", "torch.distributed.run"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"torchrun exited with {done.returncode}:\n{done.stderr[-4000:]}")
    return done.stdout


def example_script(name: str) -> Path:
    """The path of ``examples/<name>`` in this book's repository, beside the package (a clone,
    Binder). Where ``grpo_core`` was installed alone from git (Colab), clone that repository
    (the URL and revision pip recorded) into a temporary folder first. Chapter 19."""
    here = Path(__file__).resolve().parent.parent / "examples" / name
    if here.exists():
        return here
    from importlib.metadata import distribution
    from tempfile import gettempdir

    origin = json.loads(distribution("grpo-core").read_text("direct_url.json") or "{}")
    if "vcs_info" not in origin:
        raise FileNotFoundError(f"{here} is missing: run this from a clone of the book")
    clone = Path(gettempdir()) / "grpo-book-repository"
    if not clone.exists():
        subprocess.run(["git", "clone", "--quiet", "--depth", "1", "--branch",
                        origin["vcs_info"].get("requested_revision", "main"), origin["url"],
                        str(clone)], check=True)
    return clone / "examples" / name


# --- the loss on one rank ------------------------------------------------------------------------

def normalisers(trainer: GRPOTrainer, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """TRL's normalisers of this rank's micro-batch ``inputs``, as ``grpo_loss`` names them: the
    real tokens of the whole generation batch on all ranks (``num_items_in_batch``, the same on
    every rank), ``gradient_accumulation_steps``, ``num_processes`` (W) and
    ``steps_per_generation``. Chapter 19."""
    return {"num_items_in_batch": inputs["num_items_in_batch"],
            "gradient_accumulation_steps": trainer.current_gradient_accumulation_steps,
            "num_processes": trainer.accelerator.num_processes,
            "steps_per_generation": trainer.args.steps_per_generation}


def rank_loss(logp: torch.Tensor, inputs: Mapping[str, Any], args: TRLConfig,
              **norm: Any) -> torch.Tensor:
    """``grpo_core.grpo_loss`` on a micro-batch of TRL's ``_compute_loss`` (``logp (B, T)`` with its
    graph; pi_old's and pi_ref's log-probs from ``inputs``, absent -> None), with the knobs of
    ``args`` and the normalisers ``norm`` (:func:`normalisers`; none: one process, one
    micro-batch, the batch's own tokens). Chapter 19."""
    return _loss.grpo_loss(
        logp, inputs.get("old_per_token_logps"), inputs.get("ref_per_token_logps"),
        inputs["advantages"], inputs["completion_mask"].to(logp.dtype), beta=args.beta,
        epsilon=args.epsilon, epsilon_high=args.epsilon_high, loss_type=args.loss_type,
        importance_sampling_level=args.importance_sampling_level,
        max_completion_length=args.max_completion_length,
        use_bias_correction_kl=args.use_bias_correction_kl, **norm)


def _pad(x: torch.Tensor, width: int, value: float, left: bool = False) -> torch.Tensor:
    pad = torch.full((x.shape[0], width - x.shape[1]), value, dtype=x.dtype)
    return torch.cat([pad, x] if left else [x, pad], 1)


def concatenate(batches: Sequence[Mapping[str, torch.Tensor]], pad_id: int) -> dict:
    """Micro-batches (TRL's inputs, any ranks) as one batch: rows stacked, prompts left-padded
    and completions right-padded to the widest (pad ``pad_id``, mask 0, log-probs 0), as TRL pads
    one batch. ``num_items_in_batch`` is dropped: the whole batch is its own. Chapter 19."""
    p_width = max(b["prompt_ids"].shape[1] for b in batches)
    c_width = max(b["completion_ids"].shape[1] for b in batches)
    out = {"prompt_ids": torch.cat([_pad(b["prompt_ids"], p_width, pad_id, True) for b in batches]),
           "prompt_mask": torch.cat([_pad(b["prompt_mask"], p_width, 0, True) for b in batches]),
           "advantages": torch.cat([b["advantages"] for b in batches])}
    for key, value in (("completion_ids", pad_id), ("completion_mask", 0),
                       ("old_per_token_logps", 0.0), ("ref_per_token_logps", 0.0)):
        if key in batches[0]:
            out[key] = torch.cat([_pad(b[key], c_width, value) for b in batches])
    return out


# --- the checks, on a real run -------------------------------------------------------------------

def _flat(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in tensors])


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |a|: how far ``b`` is from ``a``, relative to ``a``'s largest entry."""
    return ((a - b).abs().max() / a.abs().max()).item()


class DistributedChecks:
    """Instrument a TRL 1.16 ``GRPOTrainer`` on every rank, for its first ``steps`` optimizer
    steps. Create it on every rank before ``train()`` (its gathers are collectives: a gather
    that one rank skips waits for ever), then call :meth:`results` on every rank after.

    It records, on each rank: each generation batch (rows, distinct prompts and real tokens of
    the rank's slice, ``num_items_in_batch``; the prompts and TRL's advantages, local and
    gathered, and the gathered rewards); each loss call (TRL's loss against :func:`rank_loss`
    with :func:`normalisers`, value and gradient); with ``reference`` (a model, for
    ``beta != 0``) TRL's reference log-probs against that model's, and how far the policy's
    moved from them. At each optimizer step, rank 0 compares the gradient after DDP's all-reduce
    with (a) the DDP mean of :func:`rank_loss` over every rank's micro-batches ("normalisers"),
    (b) ``grpo_loss`` in one process on the concatenated batch, log-probs from TRL's forward
    shapes ("one process"), (c) the same from one forward pass over the whole batch ("one
    forward"), (d) each rank dividing by its own tokens ("own tokens"). Chapter 19."""

    def __init__(self, trainer: GRPOTrainer, steps: int, reference=None):
        from transformers import TrainerCallback

        self.trainer, self.steps = trainer, steps
        self.generations, self.losses, self.grads = [], [], []
        self._window, self._logp = [], None
        self.reference = reference
        if reference is not None:  # TRL's patch of its own reference model (lines 1074-1077)
            from trl.trainer.utils import add_fused_lm_head

            add_fused_lm_head(reference, temperature=trainer.temperature,
                              cast_lm_head_to_fp32=trainer.args.cast_lm_head_to_fp32)
        generate, logps = trainer._generate_and_score_completions, \
            trainer._get_per_token_logps_and_entropies
        compute_loss = trainer._compute_loss

        def generate_hook(inputs):
            out = generate(inputs)
            if trainer.state.global_step < self.steps:
                self._record_generation(inputs, out)
            return out

        def logps_hook(*args, **kwargs):
            out = logps(*args, **kwargs)
            if kwargs.get("compute_entropy"):  # the call _compute_loss makes, with its graph
                self._logp = out[0]
            return out

        def loss_hook(model, inputs):
            loss = compute_loss(model, inputs)
            if trainer.model.training and trainer.state.global_step < self.steps:
                self._check_loss(loss, inputs)
            return loss

        trainer._generate_and_score_completions = generate_hook
        trainer._get_per_token_logps_and_entropies = logps_hook
        trainer._compute_loss = loss_hook

        checks = self

        class AfterAllReduce(TrainerCallback):
            def on_pre_optimizer_step(self, args, state, control, **kwargs):
                if state.global_step < checks.steps:
                    checks._check_gradient()

        trainer.add_callback(AfterAllReduce())

    @property
    def _rank(self) -> int:
        return self.trainer.accelerator.process_index

    def _params(self) -> list[torch.Tensor]:
        model = self.trainer.accelerator.unwrap_model(self.trainer.model_wrapped)
        return [p for p in model.parameters() if p.requires_grad]

    def _logps(self, model, batch) -> torch.Tensor:
        """TRL's per-token log-probs of ``batch`` under ``model`` (its own method, its shapes)."""
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
        attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
        return type(self.trainer)._get_per_token_logps_and_entropies(
            self.trainer, model, ids, attention, batch["completion_ids"].shape[1])[0]

    def _record_generation(self, inputs, out) -> None:
        tr = self.trainer
        prompts = [x["prompt"] for x in inputs]
        logs = tr._logs  # the last generation batch of every rank, gathered (TRL 2833-2837)
        weights = tr.reward_weights.tolist()
        rewards = [sum(w * r for w, r in zip(weights, rs, strict=True))
                   for rs in zip(*(logs["rewards"][n] for n in tr.reward_func_names), strict=True)]
        record = {"rank": self._rank, "step": tr.state.global_step, "rows": len(prompts),
                  "prompts": prompts, "distinct_prompts": len(set(prompts)),
                  "tokens": int(out["completion_mask"].sum()),
                  "num_items_in_batch": float(out["num_items_in_batch"]),
                  "advantages": out["advantages"].tolist(),
                  "all_prompts": list(logs["prompt"]), "all_rewards": rewards,
                  "all_advantages": list(logs["advantages"])}
        if self.reference is not None and "ref_per_token_logps" in out:
            with torch.no_grad():
                base = self._logps(self.reference, out)
                policy = self._logps(tr.accelerator.unwrap_model(tr.model_wrapped), out)
            mask, ref = out["completion_mask"].bool(), out["ref_per_token_logps"]
            record["ref_vs_reference"] = (ref - base)[mask].abs().max().item()
            record["policy_vs_ref"] = (policy - ref)[mask].abs().max().item()
        self.generations.append(record)

    def _check_loss(self, loss, inputs) -> None:
        tr, logp = self.trainer, self._logp
        ours = rank_loss(logp, inputs, tr.args, **normalisers(tr, inputs))
        params = [p for p in tr.model.parameters() if p.requires_grad]
        g_trl = _flat(torch.autograd.grad(loss, params, retain_graph=True))
        g_ours = _flat(torch.autograd.grad(ours, params, retain_graph=True))
        mask = inputs["completion_mask"]
        self.losses.append({
            "rank": self._rank, "step": tr.state.global_step, "rows": int(mask.shape[0]),
            "tokens": int(mask.sum()), "num_items_in_batch": float(inputs["num_items_in_batch"]),
            "loss": loss.item(), "loss_diff": abs(loss.item() - ours.item()),
            "grad_diff": (g_trl - g_ours).abs().max().item(), "grad_max": g_trl.abs().max().item()})
        self._window.append({k: inputs[k].detach().clone() for k in KEPT if k in inputs})

    def _check_gradient(self) -> None:
        """At an optimizer step, after DDP's all-reduce: ``p.grad`` is what Adam will apply."""
        from accelerate.utils import gather_object

        tr = self.trainer
        params = self._params()
        g_ddp = _flat([p.grad for p in params]).clone()
        windows = gather_object([self._window])  # every rank's micro-batches of this step
        g_ranks = gather_object([g_ddp])
        self._window = []
        if self._rank != 0:
            return
        model = tr.accelerator.unwrap_model(tr.model_wrapped)
        W, gas = tr.accelerator.num_processes, tr.current_gradient_accumulation_steps

        def grad(loss):
            return _flat(torch.autograd.grad(loss, params))

        micro = [mb for window in windows for mb in window]  # rank 0's first, then rank 1's...
        whole = concatenate(micro, tr.processing_class.pad_token_id)
        width = whole["completion_ids"].shape[1]
        logp_each = torch.cat([_pad(self._logps(model, mb), width, 0.0) for mb in micro])
        g_norm = sum(grad(rank_loss(self._logps(model, mb), mb, tr.args,
                                    num_items_in_batch=mb["num_items_in_batch"],
                                    gradient_accumulation_steps=gas, num_processes=W,
                                    steps_per_generation=tr.args.steps_per_generation))
                     for mb in micro) / W
        g_own = sum(grad(rank_loss(self._logps(model, mb), mb, tr.args,
                                   num_items_in_batch=mb["completion_mask"].sum()) / gas)
                    for mb in micro) / W
        self.grads.append({
            "step": tr.state.global_step, "micro_batches": len(micro),
            "tokens": [int(mb["completion_mask"].sum()) for mb in micro],
            "num_items_in_batch": [float(mb["num_items_in_batch"]) for mb in micro],
            "ranks_agree": max((g - g_ranks[0]).abs().max().item() for g in g_ranks),
            "normalisers": relative(g_ddp, g_norm),
            "one_process": relative(g_ddp, grad(rank_loss(logp_each, whole, tr.args))),
            "one_forward": relative(g_ddp, grad(rank_loss(self._logps(model, whole), whole,
                                                          tr.args))),
            "own_tokens": relative(g_ddp, g_own)})

    def results(self) -> dict | None:
        """Every rank's records, gathered: a dict on rank 0, None on the others. A collective:
        call it on every rank."""
        from accelerate.utils import gather_object

        generations = gather_object([self.generations])
        losses = gather_object([self.losses])
        if self._rank != 0:
            return None
        return {"generations": generations, "losses": [x for rank in losses for x in rank],
                "grads": self.grads}
