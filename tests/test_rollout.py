"""Prompts: the chat template renders tools itself when it can, else they go in a `<tools>` system block."""

import json

import pytest

from lopd.core.models import load_tokenizer
from lopd.core.rollout import TOOLS_BLOCK, Task, chat_text, encode_prompt, supports_tools

TOOL = {"type": "function", "function": {"name": "get", "description": "Read the counter.",
                                         "parameters": {"type": "object", "properties": {}}}}
MESSAGES = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
RENDERS_TOOLS = "{% if tools %}{{ tools | tojson }}{% endif %}"


def test_smollm2_gets_tools_in_its_system_message(tokenizer):
    assert not supports_tools(tokenizer)
    text = ("<|im_start|>system\nS" + TOOLS_BLOCK.format(tools=json.dumps(TOOL)) + "<|im_end|>\n"
            "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n")
    assert chat_text(tokenizer, MESSAGES, [TOOL]) == text
    assert encode_prompt(tokenizer, MESSAGES, [TOOL]) == tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("template,renders", [
    ("{# tools are not supported #}", False),  # the word alone does not make a tool block
    (RENDERS_TOOLS, True),
    ({"default": "", "tool_use": RENDERS_TOOLS}, True),  # a named template for tools (no key is called "tools")
], ids=["mentions-tools", "renders-tools", "tool_use-template"])
def test_supports_tools_is_decided_by_rendering(tiny_model_dir, template, renders):
    tok = load_tokenizer(tiny_model_dir)
    chatml = tok.chat_template
    tok.chat_template = ({k: v + chatml for k, v in template.items()} if isinstance(template, dict)
                         else template + chatml)
    assert supports_tools(tok) is renders
    assert (json.dumps(TOOL) in chat_text(tok, MESSAGES, [TOOL]).split("<|im_start|>system")[0]) is renders


def test_hold_out_is_fixed_by_task_ids_alone():
    import hashlib
    import random

    from lopd.core.rollout import hold_out

    tasks = [Task(f"builtin/{i:03d}", []) for i in range(40)]
    kept, held = hold_out(tasks, 7)
    # reference: the 7 ids with the smallest sha256 hex digests, by brute force over all ids
    digests = {t.task_id: hashlib.sha256(t.task_id.encode()).hexdigest() for t in tasks}
    expected = set(sorted(digests, key=digests.get)[:7])
    assert {t.task_id for t in held} == expected and len(held) == 7
    assert [t.task_id for t in kept] == [t.task_id for t in tasks if t.task_id not in expected]  # input order
    shuffled = random.Random(3).sample(tasks, len(tasks))
    assert {t.task_id for t in hold_out(shuffled, 7)[1]} == expected  # order does not move a task
    assert hold_out(tasks, 0) == (tasks, [])
    with pytest.raises(ValueError, match="cannot hold out 41 of 40"):
        hold_out(tasks, 41)
