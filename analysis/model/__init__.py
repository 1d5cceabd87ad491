"""The transfer-bound throughput model: fit, predictions, when to trust it, layer bytes.

Modules: ``fit`` (the model and the recommender), ``predict``, ``trust``, ``transfer_check``
(``python -m analysis transfer-check``), ``layer_bytes`` (bytes of one decoder layer).
"""
