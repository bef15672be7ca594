"""The code in a model's answer: what the coding reward runs and what the experience bank keeps as a trace."""

from __future__ import annotations


def extract_code(completion: str) -> str:
    """The answer's code: the last ```python block (or, failing that, the last bare ``` block),
    unless it is much shorter than the longest one (a trailing usage example); an unterminated
    block counts up to the end of the text. Without any block, the raw text."""
    text = completion
    if "</think>" in text and text.rsplit("</think>", 1)[1].strip():
        text = text.rsplit("</think>", 1)[1]  # code drafted while reasoning is not the answer
    blocks, lang, body = [], None, []
    for line in text.split("\n"):
        fence = line.strip().startswith("```")
        if lang is None and fence:
            lang, body = line.strip()[3:].strip().lower(), []
        elif lang is not None and fence:
            blocks.append((lang, "\n".join(body)))
            lang = None
        elif lang is not None and line.rstrip().endswith("```"):  # fence glued to the last line
            body.append(line.rstrip()[:-3])
            blocks.append((lang, "\n".join(body)))
            lang = None
        elif lang is not None:
            body.append(line)
    if lang is not None:  # unterminated: the rest of the text
        blocks.append((lang, "\n".join(body)))
    labelled = [code for lang, code in blocks if lang in ("python", "py", "python3", "py3")]
    candidates = labelled or [code for lang, code in blocks if lang == ""]
    candidates = [c for c in candidates if c.strip()]
    if not candidates:
        return text.strip()
    longest = max(len(c) for c in candidates)
    return [c for c in candidates if len(c) >= 0.5 * longest][-1].strip("\n")
