"""tests/trl_reference.py, the transcription of TRL's loss that the loss tests use as their oracle,
checked against the installed TRL's own source, line by line (as test_config checks the cited
lines of GRPOConfig's fields): after a TRL upgrade that changes the loss, this fails instead of
the oracle silently staying 1.16's. Lines the transcription had to adapt (TRL's ``self.`` state
made parameters, the model forward replaced by tensors) end with ``# adapted``."""

import ast
import importlib.util
import io
import tokenize
from pathlib import Path

import pytest

HERE = Path(__file__).parent
_TRL = importlib.util.find_spec("trl")
TRL = Path(_TRL.origin).parent if _TRL else Path("-")
pytestmark = pytest.mark.skipif(not TRL.exists(), reason="trl is not installed")

# transcribed function (class.name in trl_reference) -> (TRL file, TRL function, its first line)
SOURCES = {
    "TRLGRPOLoss.get_high_entropy_mask": ("trainer/grpo_trainer.py",
                                          "GRPOTrainer.get_high_entropy_mask", 1380),
    "TRLGRPOLoss.get_off_policy_mask": ("trainer/grpo_trainer.py",
                                        "GRPOTrainer.get_off_policy_mask", 2945),
    "TRLGRPOLoss.get_gamma_weights": ("trainer/grpo_trainer.py",
                                      "GRPOTrainer.get_gamma_weights", 2972),
    "TRLGRPOLoss._compute_loss": ("trainer/grpo_trainer.py", "GRPOTrainer._compute_loss", 3020),
    "vllm_importance_sampling_ratio": ("trainer/grpo_trainer.py",
                                       "GRPOTrainer._generate_and_score_completions", None),
    "rewards_and_advantages": ("trainer/grpo_trainer.py",
                               "GRPOTrainer._generate_and_score_completions", None),
    "nanstd": ("trainer/utils.py", "nanstd", 1021),
    "nanmin": ("trainer/utils.py", "nanmin", 1124),
    "nanmax": ("trainer/utils.py", "nanmax", 1141),
}


def _functions(path: Path) -> dict[str, ast.FunctionDef]:
    tree = ast.parse(path.read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            out[node.name] = node
        if isinstance(node, ast.ClassDef):
            out |= {f"{node.name}.{f.name}": f for f in node.body
                    if isinstance(f, ast.FunctionDef)}
    return out


def _code(source: str, fn: ast.FunctionDef) -> list[tuple[str, bool]]:
    """The body's code lines of ``fn`` (no docstring, no comments, whitespace collapsed), each
    with whether it ends with ``# adapted``."""
    lines = source.splitlines()
    comments = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = (tok.start[1], tok.string)
    body = fn.body[1:] if isinstance(fn.body[0], ast.Expr) and isinstance(
        fn.body[0].value, ast.Constant) and isinstance(fn.body[0].value.value, str) else fn.body
    out = []
    for row in range(body[0].lineno, fn.end_lineno + 1):
        col, comment = comments.get(row, (len(lines[row - 1]), ""))
        code = " ".join(lines[row - 1][:col].split())
        if code:
            out.append((code, comment.startswith("# adapted")))
    return out


def test_the_transcription_is_trls_source_line_for_line():
    ours_src = (HERE / "trl_reference.py").read_text()
    ours = _functions(HERE / "trl_reference.py")
    assert set(SOURCES) <= set(ours)
    verbatim = adapted = 0
    for name, (file, theirs_name, first) in SOURCES.items():
        src = (TRL / file).read_text()
        theirs = _functions(TRL / file)[theirs_name]
        if first is not None:  # the line the transcription cites
            assert theirs.lineno == first, (theirs_name, theirs.lineno, first)
        their_lines = {code for code, _ in _code(src, theirs)}
        for code, is_adapted in _code(ours_src, ours[name]):
            if is_adapted:
                adapted += 1
            else:
                assert code in their_lines, f"{name}: not in TRL's {theirs_name}: {code!r}"
                verbatim += 1
    assert verbatim > 4 * adapted, (verbatim, adapted)  # a transcription, not a rewrite
