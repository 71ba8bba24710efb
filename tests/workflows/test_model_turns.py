"""ModelTurns is built and inspected alone: a part the workflow holds, not a mixin.

It takes the input, the carried-over state and the shared conversation in its
constructor (issue 35); the workflow reads its state back for the result, the
queries and the next run's carry. The model calls themselves are covered by
the workflow tests and the recorded histories.
"""

from __future__ import annotations

from filegate.kernel.messages import Message, Usage
from filegate.workflows.context import ContextState
from filegate.workflows.inputs import AgentInput, CarryOver
from filegate.workflows.turns import ModelTurns


def test_a_first_run_starts_from_nothing_and_shares_the_conversation() -> None:
    messages = [Message(role="user", content="hello")]
    turns = ModelTurns(AgentInput(task="hello"), None, messages)
    assert (turns.steps, turns.call_index, turns.usage) == (0, 0, Usage())
    assert turns.context == ContextState()
    assert (turns.transcript, turns.script, turns.model_time) == (None, None, None)
    assert turns._messages is messages  # appended to by the workflow, quoted by the tools


def test_a_continued_run_takes_its_carry_and_hands_it_on() -> None:
    carry = CarryOver(
        call_index=7,
        counters={"steps": 5},
        usage=Usage(input_tokens=100, output_tokens=20),
        context=ContextState(start=3, summarized_chars=42),
    )
    turns = ModelTurns(AgentInput(carry=carry), carry, [])
    assert (turns.steps, turns.call_index) == (5, 7)
    assert turns.usage == carry.usage and turns.usage is not carry.usage
    assert turns.context == carry.context and turns.context is not carry.context
    handed_on = CarryOver(**turns.carried())
    assert handed_on.model_dump(include=set(turns.carried())) == carry.model_dump(
        include=set(turns.carried())
    )
