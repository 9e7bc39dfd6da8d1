"""Choose the default example: the small batch the Explore tab opens on
(app.services.default_example).

Candidates: four of the demo task's example prompts ("easy", "carry", "borrow", "easy
subtraction"), sampled G = 4 with each seed in ``--seeds`` (default 0..19) on the bundled model
(about 60% right at temperature 1, so a group of 4 is all right or all wrong often enough to
give a zero-signal group), analysed with batch-scope selection at ratio 0.2. Each candidate
is scored by :func:`app.services.default_example.disagreement_score` (entropy's wasted share plus
1 - Jaccard of the entropy and gmts selections; 0 unless exactly one group is zero-signal); the
best is stored as the definition (``static/default-example.json``, with the search's figures in
``chosen_by``) and its analysis as the shipped first result
(``static/default-example-result.json``).

Usage: ``PYTHONPATH=. .venv/bin/python scripts/choose_default_example.py [--seeds 20]``;
``--regenerate`` re-analyses the stored definition only (after the demo model was retrained or
the response body changed), keeping its ``chosen_by``.
"""

from __future__ import annotations

import argparse
import json
import logging

from app.core.config import Settings
from app.schemas.analyze_request import AnalyzeRequest
from app.services.catalog import demo_examples
from app.services.container import build_services
from app.services.default_example import (
    DEFINITION_PATH,
    RESULT_PATH,
    DefaultExample,
    default_example,
    disagreement_score,
)
from app.services.responses import as_json
from app.services.validation import validated

logger = logging.getLogger("choose_default_example")
LABELS = ("easy", "carry", "borrow", "easy subtraction")
GROUP_SIZE = 4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="try sampling seeds 0..N-1")
    parser.add_argument("--first", type=int, default=0, help="first seed to try")
    parser.add_argument(
        "--regenerate", action="store_true", help="re-analyse the stored definition, no search"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.regenerate:
        stored = default_example()
        req = validated(AnalyzeRequest, stored.request())
        body = as_json(build_services(Settings()).analysis.run(req))
        RESULT_PATH.write_text(json.dumps(body, separators=(",", ":")), encoding="utf-8")
        logger.info("wrote %s (score %.3f)", RESULT_PATH, disagreement_score(body))
        return
    examples = {e.label: e for e in demo_examples()}
    prompts = tuple((examples[k].prompt, examples[k].reference) for k in LABELS)
    services = build_services(Settings())
    best: tuple[float, DefaultExample, dict] | None = None
    for seed in range(args.first, args.seeds):
        candidate = DefaultExample(prompts=prompts, seed=seed, group_size=GROUP_SIZE)
        req = validated(AnalyzeRequest, candidate.request())
        body = as_json(services.analysis.run(req))
        score = disagreement_score(body)
        rewards = [[a["reward"] for a in g["answers"]] for g in body["groups"]]
        logger.info("seed %d: score %.3f, rewards %s", seed, score, rewards)
        if best is None or score > best[0]:
            best = (score, candidate, body)
    assert best is not None
    score, chosen, body = best
    s = body["summary"]
    figures = {
        "rule": "exactly one zero-signal group; max over seeds of entropy wasted share "
        "+ (1 - Jaccard(entropy, gmts))",
        "seeds_tried": [args.first, args.seeds - 1],
        "score": round(score, 4),
        "wasted_share": {m: round(s["wasted_share"][m], 4) for m in ("entropy", "gmts")},
        "jaccard_entropy_gmts": round(s["overlap"]["entropy|gmts"]["jaccard"], 4),
        "zero_signal_groups": s["num_zero_signal_groups"],
        "script": "scripts/choose_default_example.py",
    }
    definition = DefaultExample(**{**chosen.__dict__, "chosen_by": figures})
    DEFINITION_PATH.write_text(json.dumps(definition.to_json(), indent=1) + "\n", encoding="utf-8")
    RESULT_PATH.write_text(json.dumps(body, separators=(",", ":")), encoding="utf-8")
    logger.info("chose seed %d (%s)", chosen.seed, figures)
    logger.info("wrote %s and %s", DEFINITION_PATH, RESULT_PATH)


if __name__ == "__main__":
    main()
