"""engine.kind sklearn: a scikit-learn-compatible model file (task tabular).

``settings``, ``kind`` (its registration), ``tabular_stage`` (the predictions).
"""
