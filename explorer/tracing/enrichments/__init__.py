"""Enrichments: what a trace computes only when first asked (compile facts, analyses, other targets) and scheduling by hand."""
