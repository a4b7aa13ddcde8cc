"""Training of the demo model pairs shipped with the project (`bench/train_demo_pairs.py` drives it).

Contract: every module here is a step of one pipeline, corpus -> tokenizer -> target -> self-distillation ->
DFlash drafter -> evaluation through the runner's own decoding code (`remote/`). Nothing here is imported by
`remote/` or `orchestrator/`; it may import `remote` (run from the repository root). Non-goal: a general training
framework (one GPU, small models, fixed recipes: shared/research/demo_pair_recipe.md).
"""
