"""``python -m grpo_core``: the seven demos and the summary, as one text run of a few seconds.

The numbers are the seed script's (same seeds, same draws); the text says what is true where the
seed's claims were inexact. Every training run is done up front in a handful of batched calls.
"""

from __future__ import annotations

import gc
from functools import cache

import numpy as np
import torch

from . import (
    N_PROMPTS,
    Critic,
    best_reward,
    cos_mean_grad,
    evaluate,
    exact_moments,
    expected_scale,
    grad_variance,
    group_advantages,
    n_params,
    policy_gradient,
    sample_group,
    softmax,
    toy_world,
    train_batch,
)
from .baselines import batch_advantages

GS = [1, 2, 4, 8, 16, 32]
BETAS = [0.0, 0.02, 0.1, 0.5, 2.0]
TRAIN_SEED = 11


def header(title: str) -> None:
    print("\n" + "=" * 72 + "\n" + title + "\n" + "=" * 72)


def variance(world, kind: str, G: int = 8, critic_value=None) -> float:
    """The seed's measurement: 400 estimates from default_rng(1)."""
    return grad_variance(world.ref_logits, world.rewards, np.random.default_rng(1), G=G,
                         kind=kind, critic_value=critic_value)


@cache
def exact_variance(kind: str) -> float:
    """Exact E||g - Eg||^2 at G=8 in the demo world (a perfect critic for kind="critic")."""
    world = toy_world(0)
    fitted = (softmax(world.ref_logits) * world.rewards).sum(axis=1)
    return exact_moments(world.ref_logits, world.rewards, 8, kind, critic_value=fitted).variance


def run_all(world) -> dict:
    """Every training run the demos print, keyed by a short name: final logits (P, A).

    All the runs without a critic are one batched call (each run is bit-identical to a lone
    a lone run with the same settings); the critic runs need a second.
    """
    w = (world.rewards, world.emb, world.ref_logits)
    other_betas = [b for b in BETAS if b != 0.02]  # beta 0.02, G 8 is already in the G sweep
    keys = ([("G", g) for g in GS] + [("beta", b) for b in other_betas]
            + [("reward", 0.1), ("reward", 0.5), "batch", "group_no_std"])
    n_sweep = len(GS) + len(other_betas)
    res = train_batch(
        *w, TRAIN_SEED,
        num_generations=GS + [8] * (len(keys) - len(GS)),
        beta=[0.02] * len(GS) + other_betas + [0.1, 0.5, 0.02, 0.02],
        kl_in=["loss"] * n_sweep + ["reward", "reward", "loss", "loss"],
        kind=["group_norm"] * (n_sweep + 2) + ["batch_norm", "group"],
    )
    runs = dict(zip(keys, res.logits, strict=True))
    runs[("beta", 0.02)] = runs[("G", 8)]
    runs["critic"] = train_batch(*w, TRAIN_SEED, use_critic=True, critic_seed=0).logits[0]
    return runs


def demo_1(world) -> None:
    header("DEMO 1: why a baseline exists at all")
    rewards, ref = world.rewards, world.ref_logits
    print("every reward in this world is positive (an exact score, 0..10):")
    print(" min %.3f max %.3f" % (rewards.min(), rewards.max()))
    print("\nwith no baseline every sampled answer is pushed UP; 'better than the")
    print("others' is buried under a constant shared by good and bad answers.\n")
    v_none, v_grp = variance(world, "none"), variance(world, "group")
    ex_none, ex_grp = exact_variance("none"), exact_variance("group")
    print("gradient variance E||g - Eg||^2, G=8:      400 draws      exact")
    print(" no baseline                         %9.4f  %9.4f" % (v_none, ex_none))
    print(" group-mean baseline                 %9.4f  %9.4f" % (v_grp, ex_grp))
    print(" reduction                           %8.1fx  %8.2fx" % (v_none / v_grp,
                                                                  ex_none / ex_grp))
    print("\ndirection of the mean gradient, no baseline vs group mean:")
    print(" cosine from 400 draws each = %.4f (Monte-Carlo noise)" % cos_mean_grad(ref, rewards))
    print(" exact: the same direction; the group mean's length is (G-1)/G = %.4f"
          % expected_scale("group", 8))
    print("\nREAD THIS: a baseline that does not depend on the sample keeps the")
    print("expected gradient exactly: E[grad log pi] = 0. The group mean contains")
    print("the sample itself, so it keeps the DIRECTION but shrinks the expected")
    print("gradient by (G-1)/G; leave-one-out removes that shrink. What it buys is")
    print("variance: 4.7x less here. A baseline buys variance; GRPO gets one")
    print("without a second network (a perfect critic would have even less).")


def demo_2(world) -> None:
    header("DEMO 2: one group, by hand")
    s = sample_group(world.ref_logits, 8, np.random.default_rng(3))
    p = 2
    r = world.rewards[p][s[p]]
    adv = group_advantages(r[None, :])[0]
    print("prompt 2, G=8 sampled answers:", s[p])
    print("rewards :", np.round(r, 3))
    print("group mean : %.4f" % r.mean())
    print("group std  : %.4f (population, ddof=0; TRL and verl use ddof=1: %.4f)"
          % (r.std(), r.std(ddof=1)))
    print("advantage = (r - mean) / std :")
    for i in range(8):
        print(" answer %2d r %6.3f -> A %+7.4f" % (s[p, i], r[i], adv[i]))
    print("sum of advantages : %+.6f (zero, by construction)" % adv.sum())
    print("\nREAD THIS: no critic, no second network, no extra forward pass.")
    print("The baseline is the mean of numbers you already had to compute.")


def demo_3(world, runs) -> None:
    header("DEMO 3: the critic, and doing without it")
    rewards, ref = world.rewards, world.ref_logits
    fitted = (softmax(ref) * rewards).sum(axis=1)  # a perfect critic: the exact E[r] per prompt
    print("gradient variance, G=8:                  400 draws      exact")
    for label, kind in (("no baseline", "none"), ("perfect value baseline V = E[r]", "critic"),
                        ("group-mean baseline (GRPO)", "group"), ("leave-one-out", "loo")):
        mc = variance(world, kind, critic_value=fitted)
        print(" %-34s %9.4f  %9.4f" % (label, mc, exact_variance(kind)))
    print(" (group < critic only by the (G-1)/G shrink: unbiased, LOO is above it)")
    print("\nparameters:")
    print(" policy (6 prompts x 12 logits) %4d" % softmax(ref).size)
    print(" critic MLP (8 -> 16 -> 1)      %4d" % n_params(Critic(seed=0)))
    print(" group baseline                 %4d <- the point" % 0)
    t0, _ = evaluate(ref, rewards, ref)
    print("\n300 steps, G=8, beta=0.02, training seed 11 (critic seeded with 0):")
    print(" reference policy                true reward %.4f" % t0)
    for label, key in (("critic (no /std)", "critic"), ("group mean, no /std", "group_no_std"),
                       ("group mean and /std (GRPO)", ("G", 8))):
        print(" %-31s true reward %.4f KL %.4f" % (label, *evaluate(runs[key], rewards, ref)))
    print("\nREAD THIS: NOT the same destination: GRPO ends higher in reward and")
    print("in KL, and most of the gap is the /std, not the critic (the critic path")
    print("is unnormalised). The critic is a second network: at 7B parameters it is")
    print("7B more weights plus their optimiser state to hold in memory.")


def demo_4(world, runs) -> None:
    header("DEMO 4: group size G -- the compute-versus-variance trade")
    rewards, ref = world.rewards, world.ref_logits
    print("   G  grad variance  final true reward  note")
    for G in GS:
        v = variance(world, "group_norm", G=G)
        t, _ = evaluate(runs[("G", G)], rewards, ref)
        note = "advantage is identically 0 -- nothing trains" if G == 1 else ""
        print(" %3d  %13.4f  %17.4f  %s" % (G, v, t, note))
    t0, _ = evaluate(ref, rewards, ref)
    print("\n reference policy, untrained: true reward %.4f" % t0)
    print(" best possible (each prompt's best answer): %.4f" % best_reward(rewards))
    print("\nREAD THIS: G=1 means the group mean IS the one reward, so every")
    print("advantage is exactly zero and the reward never moves. Variance falls")
    print("like 1/G. After 300 steps every G >= 2 ends within 0.05 of the ceiling:")
    print("the price of a small G shows in learning curves against samples drawn,")
    print("not in the final number, and you pay G samples per prompt per step.")


def demo_5(world, runs) -> None:
    header("DEMO 5: the KL term -- the same leash, in a different place")
    rewards, ref = world.rewards, world.ref_logits
    print(" beta   final true reward   final KL(pi || pi_ref)")
    for beta in BETAS:
        t, k = evaluate(runs[("beta", beta)], rewards, ref)
        print(" %-6.2f %17.4f %20.4f" % (beta, t, k))
    print("\nGRPO puts beta * KL as a TERM IN THE LOSS. RLHF/PPO fold it into")
    print("the per-sample reward instead. Same beta, two placements:")
    for beta in (0.1, 0.5):
        t1, k1 = evaluate(runs[("beta", beta)], rewards, ref)
        t2, k2 = evaluate(runs[("reward", beta)], rewards, ref)
        print(" beta %.1f KL in loss   true %.4f KL %.4f" % (beta, t1, k1))
        print(" beta %.1f KL in reward true %.4f KL %.4f" % (beta, t2, k2))
    print("\nREAD THIS: the placements give different leashes for the same beta,")
    print("at beta <= 0.5 the reward placement is the tighter one: its penalty is")
    print("divided by each group's std, which late in training is < 1 on every")
    print("prompt; from beta = 1 the loss placement is tighter (chapter 6).")
    print("beta 0.02 is within noise of beta 0 here because this toy's reward is")
    print("exact; real verifiers can be gamed and entropy can collapse.")


def demo_6(world, runs) -> None:
    header("DEMO 6: within-prompt versus across-prompt baselines")
    rewards, ref = world.rewards, world.ref_logits
    s = sample_group(ref, 8, np.random.default_rng(3))
    r = np.take_along_axis(rewards, s, axis=1)
    a_grp = group_advantages(r, normalise=False)
    a_bat = batch_advantages(r, normalise=False)
    print("mean advantage per prompt, one batch (easy -> hard):")
    print(" prompt  mean reward  group baseline  batch baseline")
    for p in range(N_PROMPTS):
        print(" %d  %10.3f  %14.3f  %14.3f" % (p, r[p].mean(), a_grp[p].mean(), a_bat[p].mean()))
    print("\ngradient variance group %.4f batch %.4f"
          % (variance(world, "group"), variance(world, "batch")))
    pg, pb = softmax(runs[("G", 8)]), softmax(runs["batch"])
    print("\nfinal true reward per prompt after 300 steps:")
    print(" prompt  best possible  group baseline  batch baseline")
    for p in range(N_PROMPTS):
        print(" %d  %13.3f  %14.3f  %14.3f" % (p, rewards[p].max(), pg[p] @ rewards[p],
                                               pb[p] @ rewards[p]))
    tg, _ = evaluate(runs[("G", 8)], rewards, ref)
    tb, _ = evaluate(runs["batch"], rewards, ref)
    print(" overall %.4f (group) vs %.4f (batch)" % (tg, tb))
    print("\nREAD THIS: with one mean over the batch, a hard prompt's advantages are")
    print("negative for every answer it sampled, good ones included: in that draw")
    print("probability drains off everything sampled. On average the batch")
    print("baseline still points the right way (its expected gradient is")
    print("1 - 1/(P*G) of the true one); its cost is variance, on every prompt.")


def demo_7(world, runs) -> None:
    header("DEMO 7: four deliberate breaks, side by side")
    rewards, ref = world.rewards, world.ref_logits
    t0, _ = evaluate(ref, rewards, ref)
    print("BREAK 1 -- G=1: the group mean is the sample, advantage == 0")
    s = sample_group(ref, 1, np.random.default_rng(3))
    r = np.take_along_axis(rewards, s, axis=1)
    print(" advantages, G=1 :", group_advantages(r).ravel())
    print(" true reward after 300 steps: %.4f (reference %.4f)"
          % (evaluate(runs[("G", 1)], rewards, ref)[0], t0))
    print(" same run with G=8 : %.4f" % evaluate(runs[("G", 8)], rewards, ref)[0])

    print("\nBREAK 2 -- drop the /std: update size follows reward spread")
    s = sample_group(ref, 8, np.random.default_rng(3))
    r = np.take_along_axis(rewards, s, axis=1)
    gn = policy_gradient(ref, s, group_advantages(r, normalise=False))
    gy = policy_gradient(ref, s, group_advantages(r, normalise=True))
    print(" easy prompt 0 group std %.3f hard prompt 5 group std %.3f" % (r[0].std(), r[5].std()))
    print(" ||grad row|| unnormalised prompt 0 %.4f prompt 5 %.4f"
          % (np.linalg.norm(gn[0]), np.linalg.norm(gn[5])))
    print(" ||grad row|| normalised   prompt 0 %.4f prompt 5 %.4f"
          % (np.linalg.norm(gy[0]), np.linalg.norm(gy[5])))

    print("\nBREAK 3 -- keep the critic, never train it")
    fitted = (softmax(ref) * rewards).sum(axis=1)
    with torch.no_grad():
        fresh = Critic(seed=0)(torch.tensor(world.emb, dtype=torch.float32)).numpy()
    print(" V = 0 (this is simply no baseline)       %9.4f" % variance(world, "critic",
                                                                       critic_value=0 * fitted))
    print(" a freshly initialised Critic(seed=0)     %9.4f" % variance(world, "critic",
                                                                       critic_value=fresh))
    print(" perfect value V = E[r] (analytic)        %9.4f" % variance(world, "critic",
                                                                       critic_value=fitted))
    print(" group baseline                           %9.4f" % variance(world, "group"))

    print("\nBREAK 4 -- beta=0: no leash")
    for beta in (0.0, 0.5):
        true, kl = evaluate(runs[("beta", beta)], rewards, ref)
        print(" beta %.2f true %.4f KL %.4f" % (beta, true, kl))
    print(" (here the reward IS the truth, so drifting costs nothing. Swap the")
    print(" exact table for a learned reward model and the policy drifts to where")
    print(" that model is wrong: the leash is what keeps it honest.)")


SUMMARY = """
  1. policy gradient = A * (onehot(a) - probs), AVERAGED over the G samples
  2. A needs a baseline, or the constant part of the reward is pure noise
  3. PPO's baseline = a critic, a second network the size of the policy
  4. GRPO's baseline = the mean reward of G answers to the SAME prompt
     (it keeps the direction and scales the expected step by (G-1)/G)
  5. normalise = divide by that group's std: steady step sizes, but it also
     reweights prompts by difficulty (Dr. GRPO removes it)
  6. the leash = beta * KL(pi || pi_ref), as a TERM IN THE LOSS
  7. what you drop = the critic, its optimiser state, and its memory

  Introduced in DeepSeekMath (arXiv 2402.03300) for maths reasoning, with a
  learned reward model and beta = 0.04. DeepSeek-R1 (arXiv 2501.12948)
  applied it with rule-based verifiers. This toy's fixed reward table plays
  the role of a perfect verifier.
"""


def main() -> None:
    with np.printoptions(precision=3, suppress=True):  # arrays print as in the seed script
        _print_all()


def _print_all() -> None:
    world = toy_world(0)
    runs = run_all(world)
    demo_1(world)
    demo_2(world)
    demo_3(world, runs)
    demo_4(world, runs)
    demo_5(world, runs)
    demo_6(world, runs)
    demo_7(world, runs)
    header("GRPO, COMPRESSED")
    print(SUMMARY)


if __name__ == "__main__":
    # the imported modules (torch's many thousand objects) live until exit: keep the garbage
    # collector off them, during the run and in the full collection at exit (~0.4 s of CPU)
    gc.freeze()
    main()
