"""Approvals: how a gated tool call is put to a reviewer and how it gets its answer.

The pieces of one question, "may this call run?", asked inside the workflow:

- :mod:`.pending`: the book of pending and decided approvals, plain workflow state;
- :mod:`.models`: what reviewers send and read (decisions, pending and decided approvals);
- :mod:`.reviews`: the review desk a call waits at (a grant's answer, else a human's);
- :mod:`.grants` and :mod:`.grant_models`: approvals a reviewer asked to remember;
- :mod:`.turn_decisions`: every pending call of one model turn decided at once;
- :mod:`.handlers`: the queries, signal and updates that serve all of it to clients.

Why a package of its own: these modules make one concept and lean on one
another, while the rest of :mod:`filegate.workflows` is the loop that runs
tools (agent, file tools, calls, the gate); together here, the approval
machinery reads as one piece. All of it is pure and deterministic, so the
workflow sandbox passes the whole package through
(:data:`filegate.workflows.runner.SANDBOX_PASSTHROUGH`).

Nothing is imported here: :mod:`filegate.workflows.inputs` imports this
package's models and the modules here import the inputs, so an eager import
would make a cycle. Import from the submodules; the public names are on
:mod:`filegate.workflows`.
"""
