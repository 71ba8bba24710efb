"""Filegate's tools behind other agent frameworks' interfaces.

Each integration is a subpackage with its own optional dependencies (an extra
of the same name): ``filegate.integrations.deepagents`` needs
``pip install 'filegate[deepagents]'``. Importing this package loads none of
them. Integrations sit above the workflows and activities (``.importlinter``):
they use Filegate's public pieces and nothing imports them back.
"""
