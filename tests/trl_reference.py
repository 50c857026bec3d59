# ruff: noqa: E501  (TRL's own lines, copied as they are)
"""A line-by-line transcription of TRL 1.16.0's GRPO loss and reward/advantage block.

Source: ``trl/trainer/grpo_trainer.py`` and ``trl/trainer/utils.py`` of trl==1.16.0
(``pip download --no-deps trl==1.16.0``). The code below is TRL's own, copied statement for
statement; only the model forward (which produces ``per_token_logps`` and ``entropies``) is
replaced by tensors passed in, and ``self.accelerator`` by a stub for ``num_processes``
processes whose every process holds this batch (so ``gather`` of a local tensor is itself: the
normaliser ``num_items_in_batch`` is passed in as TRL computes it, over all processes).

- ``get_high_entropy_mask``: ``grpo_trainer.py`` lines 1380-1416
- ``get_off_policy_mask``:  lines 2945-2970
- ``get_gamma_weights``:    lines 2972-3018
- ``_compute_loss``:        lines 3020-3290 (the loss and the metrics it logs; the adaptive
  entropy coefficient and the auxiliary loss are left out)
- vLLM's importance-sampling ratio: lines 2658-2703
- reward/advantage block of ``_generate_and_score_completions``: lines 2755-2810
- ``nanstd``, ``nanmin``, ``nanmax``: ``utils.py`` lines 1021-1050, 1124-1155

Lines that could not stay verbatim (TRL's ``self.`` state made parameters, the model forward
replaced by tensors passed in) end with ``# adapted``; ``tests/test_trl_reference.py`` checks
every other line against the installed TRL's source.
"""

from __future__ import annotations

import math
from collections import defaultdict
from types import SimpleNamespace

import torch


class _Accelerator:
    """One process's view, as far as ``_compute_loss`` uses it."""

    def __init__(self, num_processes: int = 1):
        self.num_processes = num_processes
        self.sync_gradients = True

    def pad_across_processes(self, x, dim=0, pad_index=0):
        return x

    def gather(self, x):
        return x

    def reduce(self, x, reduction="sum"):
        return x


class TRLGRPOLoss:
    """The attributes ``_compute_loss`` reads, from a ``GRPOConfig``'s values (``grpo_trainer.py``
    lines 835-850, 945-946), with its code below."""

    def __init__(self, *, beta=0.0, epsilon=0.2, epsilon_high=None, delta=None, loss_type="dapo",
                 importance_sampling_level="token", max_completion_length=512,
                 use_bias_correction_kl=True, sapo_temperature_pos=1.0, sapo_temperature_neg=1.05,
                 vespo_k_pos=2.0, vespo_lambda_pos=3.0, vespo_k_neg=3.0, vespo_lambda_neg=2.0,
                 top_entropy_quantile=1.0, entropy_coef=0.0, off_policy_mask_threshold=None,
                 use_vllm=False, vllm_importance_sampling_correction=True,
                 gradient_accumulation_steps=1, num_processes=1, steps_per_generation=None):
        steps_per_generation = (gradient_accumulation_steps if steps_per_generation is None
                                else steps_per_generation)  # grpo_config.py 1095-1096
        self.args = SimpleNamespace(
            delta=delta, sapo_temperature_pos=sapo_temperature_pos,
            sapo_temperature_neg=sapo_temperature_neg, vespo_k_pos=vespo_k_pos,
            vespo_lambda_pos=vespo_lambda_pos, vespo_k_neg=vespo_k_neg,
            vespo_lambda_neg=vespo_lambda_neg, use_bias_correction_kl=use_bias_correction_kl,
            steps_per_generation=steps_per_generation)
        self.beta = beta
        self.epsilon_low = epsilon
        self.epsilon_high = epsilon_high if epsilon_high is not None else epsilon
        self.loss_type = loss_type
        self.importance_sampling_level = importance_sampling_level
        self.max_completion_length = max_completion_length
        self.top_entropy_quantile = top_entropy_quantile
        self.entropy_coef = entropy_coef
        self.use_adaptive_entropy = False
        self._entropy_bonus_enabled = self.entropy_coef != 0.0 or self.use_adaptive_entropy
        self.off_policy_mask_threshold = off_policy_mask_threshold
        self.use_vllm = use_vllm
        self.vllm_importance_sampling_correction = vllm_importance_sampling_correction
        self.current_gradient_accumulation_steps = gradient_accumulation_steps
        self.accelerator = _Accelerator(num_processes)
        self.model = SimpleNamespace(training=True)
        self.aux_loss_enabled = False
        self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}

    # grpo_trainer.py 1380-1416
    def get_high_entropy_mask(self, entropies, mask, threshold):
        local = entropies[mask.bool()].float()
        pad_value = -1e9
        padded = self.accelerator.pad_across_processes(local, dim=0, pad_index=pad_value)
        gathered = self.accelerator.gather(padded)
        gathered = gathered[gathered != pad_value]
        if gathered.numel() == 0:
            return torch.zeros_like(entropies, dtype=torch.bool)
        entropy_threshold = torch.quantile(gathered, threshold)
        masked_entropies = entropies * mask.float()
        entropy_mask = masked_entropies >= entropy_threshold
        return entropy_mask & mask.bool()

    # grpo_trainer.py 2945-2970
    @staticmethod
    def get_off_policy_mask(advantages, per_token_logps, sampling_per_token_logps, mask,
                            off_policy_threshold):
        kl_div = sampling_per_token_logps - per_token_logps.detach()
        kl_div = torch.nan_to_num(kl_div, nan=0.0)
        seq_kl_sum = (kl_div * mask).sum(dim=1, keepdim=True)
        avg_seq_kl = seq_kl_sum / mask.sum(dim=1, keepdim=True).clamp(min=1.0)
        is_pos_adv = advantages >= 0
        is_low_kl = avg_seq_kl <= off_policy_threshold
        return (is_pos_adv | is_low_kl).to(dtype=mask.dtype)

    # grpo_trainer.py 2972-3018
    @staticmethod
    @torch.no_grad()
    def get_gamma_weights(advantages, log_ratio_per_token, mask, importance_sampling_ratio,
                          k_pos=2.0, lambda_pos=3.0, k_neg=3.0, lambda_neg=2.0):
        lower_clamp = math.log(1e-8)
        log_ratio_clamped = torch.clamp(log_ratio_per_token, -20.0, 20.0)
        seq_log_ratio = torch.sum(log_ratio_clamped * mask, dim=-1, keepdim=True)
        if importance_sampling_ratio is not None:
            log_is_ratio = torch.clamp(torch.log(importance_sampling_ratio), lower_clamp, 20.0)
            seq_log_ratio += torch.sum(log_is_ratio, dim=-1, keepdim=True)
        log_w_seq = torch.clamp(seq_log_ratio, lower_clamp, 20.0)
        w_seq = torch.exp(log_w_seq)
        is_nonneg_adv = advantages >= 0
        k_seq = torch.where(is_nonneg_adv, k_pos, k_neg)
        lambda_seq = torch.where(is_nonneg_adv, lambda_pos, lambda_neg).clamp(min=1e-4)
        log_phi = lambda_seq + k_seq * log_w_seq - lambda_seq * w_seq
        phi_seq = torch.exp(log_phi).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
        return phi_seq

    # grpo_trainer.py 3020-3245; lines 3022-3046 (the model forward) replaced by the arguments
    def _compute_loss(self, per_token_logps, entropies, inputs):
        completion_mask = inputs["completion_mask"]  # adapted
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]

        if self.top_entropy_quantile < 1.0:
            entropy_mask = self.get_high_entropy_mask(entropies, mask, 1 - self.top_entropy_quantile)
        else:
            entropy_mask = None

        advantages = inputs["advantages"]
        if advantages.dim() == 1:
            advantages = advantages.unsqueeze(1)
        old_per_token_logps = inputs.get("old_per_token_logps")
        old_per_token_logps = per_token_logps.detach() if old_per_token_logps is None else old_per_token_logps

        if self.off_policy_mask_threshold is not None:
            sampling_per_token_logps = inputs.get("sampling_per_token_logps", old_per_token_logps)
            off_policy_mask = self.get_off_policy_mask(
                advantages=advantages,
                per_token_logps=per_token_logps,
                sampling_per_token_logps=sampling_per_token_logps,
                mask=mask,
                off_policy_threshold=self.off_policy_mask_threshold,
            )

        log_ratio = per_token_logps - old_per_token_logps
        if self.importance_sampling_level == "token":
            log_importance_weights = log_ratio
        elif self.importance_sampling_level == "sequence":
            log_importance_weights = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
            log_importance_weights = log_importance_weights.unsqueeze(-1)
        else:
            raise ValueError(self.importance_sampling_level)  # adapted

        coef_1 = torch.exp(log_importance_weights)

        if self.beta != 0.0:
            ref_per_token_logps = inputs["ref_per_token_logps"]
            per_token_kl = (
                torch.exp(ref_per_token_logps - per_token_logps) - (ref_per_token_logps - per_token_logps) - 1
            )
            if self.args.use_bias_correction_kl:
                per_token_kl = per_token_kl * coef_1

        if self.loss_type == "cispo":
            clamped_ratios = torch.clamp(coef_1, max=self.epsilon_high).detach()
            per_token_loss = -clamped_ratios * advantages * per_token_logps
        elif self.loss_type in ["grpo", "bnpo", "dr_grpo", "dapo", "luspo"]:
            coef_2 = torch.clamp(coef_1, 1 - self.epsilon_low, 1 + self.epsilon_high)
            if self.args.delta is not None:
                coef_1 = torch.clamp(coef_1, max=self.args.delta)
            per_token_loss1 = coef_1 * advantages
            per_token_loss2 = coef_2 * advantages
            per_token_loss = -torch.min(per_token_loss1, per_token_loss2)
        elif self.loss_type == "sapo":
            temperatures = torch.where(advantages > 0, self.args.sapo_temperature_pos, self.args.sapo_temperature_neg)
            soft_coef_1 = torch.sigmoid(temperatures * (coef_1 - 1)) * 4 / temperatures
            per_token_loss = -soft_coef_1 * advantages
        elif self.loss_type == "vespo":
            phi_seq = self.get_gamma_weights(
                advantages=advantages,
                log_ratio_per_token=log_ratio,
                mask=mask,
                importance_sampling_ratio=inputs.get("importance_sampling_ratio"),
                k_pos=self.args.vespo_k_pos,
                lambda_pos=self.args.vespo_lambda_pos,
                k_neg=self.args.vespo_k_neg,
                lambda_neg=self.args.vespo_lambda_neg,
            )
            per_token_loss = -phi_seq * advantages * per_token_logps
        else:
            raise ValueError(f"Unknown loss type: {self.loss_type}")

        if self.off_policy_mask_threshold is not None:
            per_token_loss = per_token_loss * off_policy_mask

        if entropy_mask is not None:
            per_token_loss = per_token_loss * entropy_mask

        if self.use_vllm and self.vllm_importance_sampling_correction and self.loss_type != "vespo":
            per_token_loss = per_token_loss * inputs["importance_sampling_ratio"]

        if self.beta != 0.0:
            per_token_loss = per_token_loss + self.beta * per_token_kl

        mode = "train" if self.model.training else "eval"
        if self.loss_type in ["grpo", "sapo"]:
            loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
            normalizer = self.current_gradient_accumulation_steps if mode == "train" else 1.0
            loss = loss / normalizer
        elif self.loss_type == "bnpo":
            loss = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)
            normalizer = self.current_gradient_accumulation_steps if mode == "train" else 1.0
            loss = loss / normalizer
        elif self.loss_type == "dr_grpo":
            loss = (per_token_loss * mask).sum() / (per_token_loss.size(0) * self.max_completion_length)
            normalizer = self.current_gradient_accumulation_steps if mode == "train" else 1.0
            loss = loss / normalizer
        elif self.loss_type in ["cispo", "dapo", "vespo"]:
            normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
            if mode == "train":
                normalizer = normalizer * self.current_gradient_accumulation_steps / self.args.steps_per_generation
            loss = (per_token_loss * mask).sum() / normalizer
        elif self.loss_type == "luspo":
            loss = (per_token_loss * mask).sum(-1).mean()
            normalizer = self.current_gradient_accumulation_steps if mode == "train" else 1.0
            loss = loss / normalizer
        else:
            raise ValueError(f"Unknown loss type: {self.loss_type}")

        if self._entropy_bonus_enabled:
            effective_mask = mask if entropy_mask is None else mask * entropy_mask
            accumulation_factor = self.current_gradient_accumulation_steps if mode == "train" else 1.0
            entropy_loss = (
                (entropies * effective_mask).sum() / effective_mask.sum().clamp(min=1.0) / accumulation_factor
            )
            if self.use_adaptive_entropy:
                raise NotImplementedError  # adapted: adaptive control is state across steps, not the loss
            else:
                apply_coef = self.entropy_coef
            loss = loss - apply_coef * entropy_loss

        # Log the metrics
        def masked_seq_mean(x):
            if x.shape[1] == 1:  # when importance_sampling_level == "sequence": already one value per sequence
                return x.squeeze(1)
            return (x * mask).sum(-1) / mask.sum(-1)

        def global_masked_mean(x):
            if x.shape[1] == 1:  # when importance_sampling_level == "sequence": one value per sequence
                local_sum, local_count = x.sum(), torch.tensor(float(x.shape[0]), device=x.device)
            else:
                local_sum, local_count = (x * mask).sum(), mask.sum().float()
            totals = self.accelerator.reduce(torch.stack([local_sum, local_count]), reduction="sum")
            return (totals[0] / totals[1].clamp(min=1.0)).item()

        if self.beta != 0.0:
            self._metrics[mode]["kl"].append(global_masked_mean(per_token_kl))

        if entropies is not None:  # adapted: the forward pass's entropies may not be given
            self._metrics[mode]["entropy"].append(global_masked_mean(entropies))

        if self.loss_type in ["grpo", "bnpo", "dr_grpo", "dapo", "luspo"]:
            # Compute the clipped probability ratios
            is_low_clipped = (coef_1 < 1 - self.epsilon_low) & (advantages < 0)
            is_high_clipped = (coef_1 > 1 + self.epsilon_high) & (advantages > 0)
            is_region_clipped = is_low_clipped | is_high_clipped
            self._metrics[mode]["clip_ratio/low_mean"].append(global_masked_mean(is_low_clipped.float()))
            self._metrics[mode]["clip_ratio/high_mean"].append(global_masked_mean(is_high_clipped.float()))
            self._metrics[mode]["clip_ratio/region_mean"].append(global_masked_mean(is_region_clipped.float()))
            gathered_low_clip = self.accelerator.gather(masked_seq_mean(is_low_clipped.float()))
            self._metrics[mode]["clip_ratio/low_min"].append(nanmin(gathered_low_clip).item())
            gathered_high_clip = self.accelerator.gather(masked_seq_mean(is_high_clipped.float()))
            self._metrics[mode]["clip_ratio/high_max"].append(nanmax(gathered_high_clip).item())
        elif self.loss_type == "cispo":
            is_cispo_clipped = (coef_1 > self.epsilon_high) & (advantages > 0)
            self._metrics[mode]["cispo_clip_ratio"].append(global_masked_mean(is_cispo_clipped.float()))
        elif self.loss_type == "vespo":
            self._metrics[mode]["vespo/phi_seq_mean"].append(global_masked_mean(phi_seq))

        return loss


def vllm_importance_sampling_ratio(old_per_token_logps, sampling_per_token_logps, completion_mask,
                                   vllm_importance_sampling_mode="sequence_mask",
                                   vllm_importance_sampling_clip_min=None,
                                   vllm_importance_sampling_clip_max=3.0):
    """grpo_trainer.py 2658-2703 (``tool_mask`` None)."""
    mask = completion_mask  # adapted
    per_token_logps_diff = (old_per_token_logps - sampling_per_token_logps) * mask
    per_token_logps_diff = torch.nan_to_num(per_token_logps_diff, nan=0.0)
    sequence_level_is = vllm_importance_sampling_mode in ["sequence_mask", "sequence_truncate"]  # adapted
    if sequence_level_is:
        per_sequence_logps_diff = per_token_logps_diff.sum(dim=-1, keepdim=True)
        logps_diff = per_sequence_logps_diff
    else:
        logps_diff = per_token_logps_diff
    vllm_importance_sampling_ratio = torch.exp(logps_diff)
    if vllm_importance_sampling_mode in ["sequence_truncate", "token_truncate"]:  # adapted
        vllm_importance_sampling_ratio = torch.clamp(
            vllm_importance_sampling_ratio,
            min=vllm_importance_sampling_clip_min,  # adapted
            max=vllm_importance_sampling_clip_max,  # adapted
        )
    elif vllm_importance_sampling_mode in ["sequence_mask", "token_mask"]:  # adapted
        min_val = vllm_importance_sampling_clip_min if vllm_importance_sampling_clip_min is not None else -math.inf  # adapted
        max_val = vllm_importance_sampling_clip_max if vllm_importance_sampling_clip_max is not None else math.inf  # adapted
        invalid_mis_mask = (vllm_importance_sampling_ratio < min_val) | (vllm_importance_sampling_ratio > max_val)  # adapted
        vllm_importance_sampling_ratio = vllm_importance_sampling_ratio.masked_fill(invalid_mis_mask, value=0.0)  # adapted
    else:
        raise ValueError(vllm_importance_sampling_mode)  # adapted
    return vllm_importance_sampling_ratio  # adapted


# utils.py 1124-1155 (docstrings left out)
def nanmin(tensor: torch.Tensor) -> torch.Tensor:
    if torch.isnan(tensor).all():
        return torch.tensor(float("nan"), dtype=tensor.dtype, device=tensor.device)
    return torch.min(tensor[~torch.isnan(tensor)])


def nanmax(tensor: torch.Tensor) -> torch.Tensor:
    if torch.isnan(tensor).all():
        return torch.tensor(float("nan"), dtype=tensor.dtype, device=tensor.device)
    return torch.max(tensor[~torch.isnan(tensor)])


# utils.py 1021-1050
def nanstd(tensor, dim=None, keepdim=False):
    mean = torch.nanmean(tensor, dim=dim, keepdim=True)
    variance = torch.nanmean((tensor - mean) ** 2, dim=dim, keepdim=True)
    count = torch.sum(~torch.isnan(tensor), dim=dim, keepdim=True)
    correction = count / (count - 1)
    correction = torch.where(count > 1, correction, torch.full_like(correction, float("nan")))
    variance *= correction
    std = torch.sqrt(variance)
    if keepdim:
        return std
    if dim is None:
        return std.squeeze()
    if isinstance(dim, int):
        return std.squeeze(dim)
    dims = [(d if d >= 0 else d + std.ndim) for d in dim]
    for d in sorted(dims, reverse=True):
        std = std.squeeze(d)
    return std


def rewards_and_advantages(rewards_per_func, num_generations, reward_weights=None,
                           multi_objective_aggregation="sum_then_normalize", scale_rewards="group"):
    """grpo_trainer.py 2755-2810, plus the logged reward (2826-2830). ``rewards_per_func (N, F)``
    float32 with NaN for None (``_calculate_rewards``, lines 1581 and 1627-1636);
    ``reward_weights``: ``grpo_trainer.py`` 568-576. Returns (advantages, logged rewards,
    is_std_zero)."""
    n_funcs = rewards_per_func.shape[1]  # adapted
    if reward_weights is not None:  # adapted
        reward_weights = torch.tensor(reward_weights, dtype=torch.float32)  # adapted
    else:
        reward_weights = torch.ones(n_funcs, dtype=torch.float32)  # adapted
    device = rewards_per_func.device  # adapted
    unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)

    if multi_objective_aggregation == "sum_then_normalize":  # adapted
        rewards = (rewards_per_func * reward_weights.to(device).unsqueeze(0)).nansum(dim=1)  # adapted
        rewards[unscorable_mask] = torch.nan
        mean_grouped_rewards = torch.nanmean(rewards.view(-1, num_generations), dim=1)
        mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(num_generations, dim=0)
        if scale_rewards in ["group", "none"]:  # adapted
            if num_generations > 1:
                std_rewards = nanstd(rewards.view(-1, num_generations), dim=1)
                std_rewards = std_rewards.repeat_interleave(num_generations, dim=0)
            else:
                std_rewards = torch.zeros_like(rewards)
        elif scale_rewards == "batch":  # adapted
            if rewards.numel() > 1:
                std_rewards = nanstd(rewards).expand_as(rewards)
            else:
                std_rewards = torch.zeros_like(rewards)
        else:
            raise ValueError(scale_rewards)  # adapted
        advantages = rewards - mean_grouped_rewards
        if scale_rewards != "none":  # adapted
            advantages = advantages / (std_rewards + 1e-4)
        is_std_zero = torch.isclose(std_rewards, torch.zeros_like(std_rewards))
    elif multi_objective_aggregation == "normalize_then_sum":  # adapted
        grouped = rewards_per_func.view(-1, num_generations, n_funcs)  # adapted
        mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
        std_k = nanstd(grouped, dim=1, keepdim=True) if num_generations > 1 else torch.zeros_like(mean_k)
        reward_k = (grouped - mean_k) / (std_k + 1e-4)
        reward_k = reward_k.view(-1, n_funcs)  # adapted
        rewards = (reward_k * reward_weights.to(device).unsqueeze(0)).nansum(dim=1)  # adapted
        rewards[unscorable_mask] = torch.nan
        std_rewards = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
        advantages = (rewards - torch.nanmean(rewards)) / (std_rewards + 1e-4)
        is_std_zero = torch.isclose(std_rewards, torch.zeros_like(std_rewards))
    else:
        raise ValueError(multi_objective_aggregation)  # adapted
    advantages = torch.nan_to_num(advantages, nan=0.0)
    rewards = (rewards_per_func * reward_weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)  # adapted
    rewards[unscorable_mask] = torch.nan
    return advantages, rewards, is_std_zero  # adapted
