"""engine.kind python: the user's own predictor class (task custom).

``settings``, ``kind`` (its registration), ``predictor_stage`` (the class on Ray Data).
"""
