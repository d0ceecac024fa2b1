"""Integrations with other frameworks, each an optional extra of ort-core.

``batch_feeds`` (numpy only) turns dataset batches into model runs and back; ``ray`` drives it from Ray Data
(``pip install "ort-core[ray]"``), and ``ray_batch`` is the ``ort-core batch`` command built on it. Importing
``ort_core`` never imports these.
"""
