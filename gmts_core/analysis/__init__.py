"""Analysis of groups of answers: `analyze` (the one entry point), its typed records, and
the teaching summaries (gradient coverage, overlaps, Spearman correlations, wasted share).
"""
