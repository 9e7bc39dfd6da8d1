"""Synthetic analysed steps with realistic texts: the scale benchmark's data.

What makes a dataset of real rollouts expensive to query is its text, so the texts here have
the sizes and the statistics of real ones (the numbers are :func:`synthetic_step`'s):

- **answer lengths** log-normal with median 156 and mean 236 tokens (μ = ln 156,
  σ = √(2 ln(236/156)) ≈ 0.91), clipped to [1, 4,096]: the long tail of RL rollouts, where a
  few answers run to the length limit;
- **a BPE-like vocabulary** of :data:`VOCAB_SIZE` strings (:func:`vocabulary`): frequent
  English words and punctuation first, then generated pieces — most with a leading space (a
  word's start), some without (a word's continuation), digits, operators, newlines — drawn
  with Zipf–Mandelbrot frequencies (p(rank r) ∝ 1/(r + 2.7)^1.07, as measured on English BPE
  corpora); an answer's text is its tokens' texts joined, so the token view and the answer's
  text agree;
- **prompts** of log-normal length (median 60 tokens) from the same vocabulary, one per group;
- **37% zero-signal groups** (every answer of the group has the same reward), the rest with
  both rewards present.

Everything is built with numpy and pyarrow compute, no Python loop per token or per answer, so
a million rollouts (≈ 247 M tokens) are written in minutes.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gmts_core.knobs import DEFAULT_RATIO
from gmts_core.run_dataset.synthetic import group_advantages
from gmts_core.run_dataset.writer import StepColumns

VOCAB_SIZE = 30_000
MEDIAN_LENGTH = 156.0
MEAN_LENGTH = 236.0
MAX_LENGTH = 4096
ZERO_SIGNAL_SHARE = 0.37
_COMMON = (
    " the , . of and to a in is that for it as with be on this are by we = + the"
    " not or from at can which so an if then its have there x y n number answer step"
    " let first second value total each two three 1 2 3 4 5 6 7 8 9 0 therefore thus"
).split(" ")
_SYLLABLES = np.array(
    [c + v for c in "bcdfghklmnprstvwz" for v in ("a", "e", "i", "o", "u", "er", "an", "on")]
)


def vocabulary(seed: int = 0, size: int = VOCAB_SIZE) -> pa.Array:
    """``size`` distinct BPE-like token strings, the most frequent first."""
    rng = np.random.default_rng(seed)
    head = [" " + w if w and w[0].isalpha() else w for w in _COMMON if w]
    head += [",", ".", "\n", "\n\n", " (", ")", ":", " $", "$", "\\", "{", "}", "^", "_", "*"]
    head += [str(d) for d in range(100)]
    seen: dict[str, None] = dict.fromkeys(head)
    while len(seen) < size:
        n = size - len(seen)
        parts = rng.integers(1, 4, n)
        sy = _SYLLABLES[rng.integers(0, len(_SYLLABLES), (n, 3))]
        words = np.where(parts >= 2, np.char.add(sy[:, 0], sy[:, 1]), sy[:, 0])
        words = np.where(parts >= 3, np.char.add(words, sy[:, 2]), words)
        lead = rng.random(n)  # 70% a word's start, 25% a continuation, 5% capitalised
        words = np.where(lead < 0.7, np.char.add(" ", words), words)
        words = np.where(lead > 0.95, np.char.add(" ", np.char.capitalize(words)), words)
        seen.update(dict.fromkeys(words.tolist()))
    return pa.array(list(seen)[:size], pa.string())


def zipf_ids(rng: np.random.Generator, n: int, size: int = VOCAB_SIZE) -> np.ndarray:
    """``n`` token ids with Zipf–Mandelbrot frequencies over ``size`` ranks."""
    ranks = np.arange(1, size + 1, dtype=np.float64)
    cdf = np.cumsum(1.0 / (ranks + 2.7) ** 1.07)
    cdf /= cdf[-1]
    return np.minimum(np.searchsorted(cdf, rng.random(n)), size - 1).astype(np.int32)


def lognormal_lengths(rng: np.random.Generator, n: int) -> np.ndarray:
    sigma = float(np.sqrt(2 * np.log(MEAN_LENGTH / MEDIAN_LENGTH)))
    raw = rng.lognormal(np.log(MEDIAN_LENGTH), sigma, n)
    return np.clip(np.rint(raw), 1, MAX_LENGTH).astype(np.int32)


def joined(vocab: pa.Array, ids: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """The texts of consecutive runs of ``lengths`` tokens, each its tokens' strings joined."""
    offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int32)
    pieces = vocab.take(pa.array(ids))
    return pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), pieces), "")


def rewards(rng: np.random.Generator, groups: int, size: int) -> np.ndarray:
    """0/1 rewards: ZERO_SIGNAL_SHARE of the groups all equal, the others both present."""
    zero = np.zeros(groups, dtype=bool)
    zero[rng.permutation(groups)[: int(round(ZERO_SIGNAL_SHARE * groups))]] = True
    p = np.where(zero, rng.integers(0, 2, groups), rng.uniform(0.15, 0.85, groups))
    r = (rng.random((groups, size)) < p[:, None]).astype(np.float32)
    mixed = ~zero & (r.min(axis=1) == r.max(axis=1))
    r[mixed, 0] = 1.0
    r[mixed, 1 % size] = 0.0
    return r.reshape(-1)


def realistic_step(
    step: int,
    num_groups: int,
    group_size: int,
    rng: np.random.Generator,
    vocab: pa.Array,
    ratio: float = DEFAULT_RATIO,
) -> StepColumns:
    """One step of ``num_groups`` × ``group_size`` answers with realistic texts, entropy and
    gmts selections (each method's rule on the step's numbers)."""
    m = num_groups * group_size
    lengths = lognormal_lengths(rng, m)
    n = int(lengths.sum())
    ids = zipf_ids(rng, n, len(vocab))
    a_group = np.repeat(np.arange(num_groups, dtype=np.int32), group_size)
    a_index = np.tile(np.arange(group_size, dtype=np.int32), num_groups)
    reward = rewards(rng, num_groups, group_size)
    advantage = group_advantages(reward, num_groups, group_size)
    weight = np.full(m, 1.0 / max(n, 1), dtype=np.float32)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    entropy = rng.gamma(0.4, 0.6, n).astype(np.float32)
    grad_norm = np.sqrt(1 - np.exp(-entropy)).astype(np.float32) * rng.random(n, np.float32)
    gamma = (np.repeat(np.abs(advantage) * weight, lengths) * grad_norm).astype(np.float32)
    k = int(n * ratio)
    selected = {}
    for name, score in (("entropy", entropy), ("gmts", gamma)):
        flags = np.zeros(n, dtype=bool)
        flags[np.argpartition(-score, k)[:k] if 0 < k < n else slice(0, k)] = True
        selected[name] = flags
    prompt_lengths = np.clip(np.rint(rng.lognormal(np.log(60), 0.6, num_groups)), 4, 1024)
    prompt_ids = zipf_ids(rng, int(prompt_lengths.sum()), len(vocab))
    prompts = joined(vocab, prompt_ids, prompt_lengths.astype(np.int64))
    return StepColumns(
        step=step,
        methods=("entropy", "gmts"),
        group=np.repeat(a_group, lengths),
        answer=np.repeat(a_index, lengths),
        position=(np.arange(n) - np.repeat(starts, lengths)).astype(np.int32),
        token_id=ids.astype(np.int64),
        text=pa.DictionaryArray.from_arrays(pa.array(ids), vocab),
        logprob=-rng.exponential(0.3, n).astype(np.float32),
        entropy=entropy,
        grad_norm=grad_norm,
        gamma=gamma,
        selected=selected,
        answer_group=a_group,
        answer_index=a_index,
        prompt=prompts.take(pa.array(a_group)).to_pylist(),
        answer_text=joined(vocab, ids, lengths),
        reward=reward,
        advantage=advantage,
        weight=weight,
        length=lengths,
    )
