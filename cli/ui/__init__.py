"""The approval web UI (``filegate ui``, and ``filegate dev``'s page): the reviewer's browser desk.

- :mod:`.app`: the Starlette app, its routes and ``filegate ui``;
- :mod:`.cards`: what one approval card shows (pure, no web framework);
- :mod:`.listing` and :mod:`.decided`: finding pending and recently decided
  approvals across workflows (``filegate approvals`` lists through
  :mod:`.listing` too);
- :mod:`.turns` and :mod:`.grants`: "Approve all N" per model turn, the
  grants tab and "remember";
- :mod:`.web_guard` and :mod:`.web_hosts`: who may drive the UI and from where
  (the MCP server's HTTP transport shares the guard);
- ``templates/`` and ``static/``: the pages and their script (package data).

Why a package of its own: the UI is one optional surface (the ``ui`` extra:
Starlette, Jinja2, uvicorn) with its own assets, and the other commands load
it only when they serve a page. Nothing is imported here, so
``filegate.cli.ui.listing`` loads no web framework.
"""
