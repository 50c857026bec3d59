"""Chapter 18's task: add one to a number, written as a reader writes a task of their own.

A prompt is a number's digits and ``=``; the completion is the digits of the number plus one,
then EOS: ``4 0 9 =`` -> ``4 1 0 <eos>``, ``9 9 =`` -> ``1 0 0 <eos>``. Numbers of 2, 3 and 4
digits make prompts of 3, 4 and 5 tokens: three prompt classes, which TRL left-pads to one length
in a batch. The reward is exact match on the completion's token ids, EOS included.

Everything a new task needs is here, about 60 lines: the vocabulary as a Hugging Face tokenizer,
the prompts and answers, a seeded held-out split, the two datasets (prompt-completion pairs for
``SFTTrainer``, prompts with an answer column for ``GRPOTrainer``) and the reward function. To
train your own task, copy this module and change these functions; ``examples/train_own_task.py``
and the helpers of ``grpo_core.own_task`` stay as they are. Chapter 18.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from datasets import Dataset
    from transformers import PreTrainedTokenizerFast

CLASSES = (2, 3, 4)  # digits in the number: the prompt classes
VOCAB = [*"0123456789", "=", "<eos>", "<pad>"]  # token id = position in this list
MAX_COMPLETION_LENGTH = 6  # the longest answer: 9999 + 1 -> "1 0 0 0 0 <eos>"


def make_tokenizer() -> PreTrainedTokenizerFast:
    """The vocabulary as a ``transformers`` tokenizer, built in memory: one word per token,
    words split on spaces. ``<eos>`` ends every answer; ``<pad>`` fills the batch (a pad token
    distinct from EOS, so a padded position never looks like an answer's end). Chapter 18."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = Tokenizer(models.WordLevel(vocab={word: i for i, word in enumerate(VOCAB)}))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=words, eos_token="<eos>", pad_token="<pad>")


def prompt(n: int) -> str:
    """``409`` -> ``"4 0 9 ="``. Chapter 18."""
    return " ".join(str(n)) + " ="


def answer(n: int) -> str:
    """``409`` -> ``"4 1 0"`` (the tokenizer's EOS follows it). Chapter 18."""
    return " ".join(str(n + 1))


def split(seed: int = 0, n_held_out: int = 40) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """A seeded split of every number of each class: ``(train, held_out)``, each a dict class ->
    numbers; ``n_held_out`` numbers per class are never trained on. Chapter 18."""
    rng = random.Random(seed)
    train, held_out = {}, {}
    for digits in CLASSES:
        numbers = list(range(10 ** (digits - 1), 10**digits))
        rng.shuffle(numbers)
        held_out[digits], train[digits] = sorted(numbers[:n_held_out]), numbers[n_held_out:]
    return train, held_out


def balanced(numbers: dict[int, list[int]], per_class: int, seed: int) -> list[int]:
    """``per_class`` numbers drawn from each class (with replacement: the 2-digit class has only
    50 training numbers), shuffled together. Chapter 18."""
    rng = random.Random(seed)
    drawn = [rng.choice(numbers[c]) for c in CLASSES for _ in range(per_class)]
    rng.shuffle(drawn)
    return drawn


def sft_dataset(numbers: Sequence[int], *, noise: float, seed: int) -> Dataset:
    """Supervised data for ``SFTTrainer``: ``"prompt"`` and ``"completion"`` text (TRL appends
    EOS to the completion). A fraction ``noise`` of the completions (drawn with ``seed``) are
    wrong the way chapter 15's were: the prompt's digits copied, the one not added. Chapter 18."""
    from datasets import Dataset

    rng = random.Random(seed)
    completions = [" " + (" ".join(str(n)) if rng.random() < noise else answer(n))
                   for n in numbers]
    return Dataset.from_dict({"prompt": [prompt(n) for n in numbers], "completion": completions})


def grpo_dataset(numbers: Sequence[int], tokenizer: PreTrainedTokenizerFast) -> Dataset:
    """Prompts for ``GRPOTrainer``, with two more columns TRL hands to every reward function:
    ``"answer"`` (the answer's token ids, EOS included) and ``"digits"`` (the class). Chapter 18."""
    from datasets import Dataset

    return Dataset.from_dict({"prompt": [prompt(n) for n in numbers],
                              "answer": answer_ids(numbers, tokenizer),
                              "digits": [len(str(n)) for n in numbers]})


def answer_ids(numbers: Sequence[int], tokenizer: PreTrainedTokenizerFast) -> list[list[int]]:
    """Each number's answer as token ids, EOS included: ``409`` -> ``[4, 1, 0, 11]``.
    Chapter 18."""
    return [tokenizer(answer(n))["input_ids"] + [tokenizer.eos_token_id] for n in numbers]


def exact_match(prompts: Sequence[str], completions: Sequence[str],
                completion_ids: Sequence[Sequence[int]], answer: Sequence[Sequence[int]],
                **kwargs: Any) -> list[float]:
    """The reward, with TRL's signature: 1.0 where the completion's token ids begin with the
    answer's, EOS included, else 0.0. It reads ids, not text: TRL decodes ``completions``
    without special tokens, so ``"4 1 0"`` is also what ``4 1 0 0 0 0`` looks like. Chapter 18."""
    return [float(list(ids[:len(a)]) == list(a))
            for ids, a in zip(completion_ids, answer, strict=True)]
