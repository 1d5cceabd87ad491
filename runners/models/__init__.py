"""Small models made here: the tiny random Qwen2 model, the trained answering model, a phase's model.

Modules: ``tiny_model`` (deterministic tiny Qwen2 checkpoint), ``qwen2_torch`` (Qwen2 in plain
torch, for training), ``answering_model`` (trains the committed answering model),
``accuracy_model`` (an accuracy phase's own model directory).
"""
