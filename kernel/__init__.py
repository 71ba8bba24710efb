"""The pure kernel: what both sides of a tool call agree on, with no I/O.

Paths and their validation, permission rules, routing, the result models and
content blocks, rendering for the model, the media table and the limits and
defaults. The workflow sandbox passes this package through (imported once per
worker, never re-imported per run), so it must stay deterministic and cheap:
no Temporal worker, no minio, no threads, no file or network access. An
import-linter contract (``.importlinter``) keeps it that way.
"""
