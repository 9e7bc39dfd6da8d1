"""Numeric bounds every entry point shares, so no input can overflow or stall a computation.

- ``MIN_TEMPERATURE``: pi = softmax(z / tau) and the gradient norm 1/tau blow up as tau -> 0
  (1e-300 gives inf/NaN probabilities); temperatures below 1e-3 are refused (0, greedy
  decoding, is allowed where it is documented, e.g. evaluation).
- ``MAX_ABS_REWARD``: rewards (explicit or from a rule) beyond +-1e9 are refused, so group
  advantages and the loss stay finite in float64 and float32 (r_i - mean r of two rewards of
  +-1e308 overflows to inf).
- ``MAX_NUMBER_DIGITS`` / ``MAX_NUMBER_EXPONENT``: a number read from text (a reward reference
  or an answer) has at most 100 digits and a decimal exponent of at most 400 in size; parsing
  "1e10000000" exactly would build a 10-million-digit integer and hold the interpreter for
  seconds.
- ``MAX_SEED``: seeds feed torch and numpy generators, which take unsigned 32-bit seeds.
- ``MIN_RATIO``: a selection ratio selects k = ceil(ratio * N) tokens, with ratio * N rounded to
  9 decimals against float noise; below 1e-6 the product rounds to 0 for small N and nothing is
  selected, so smaller ratios are refused.
"""

from __future__ import annotations

MIN_TEMPERATURE = 1e-3
MAX_ABS_REWARD = 1e9
MAX_NUMBER_DIGITS = 100
MAX_NUMBER_EXPONENT = 400
MAX_SEED = 2**32 - 1
MIN_RATIO = 1e-6
