"""Scripted replies (test-only, `--scripted-replies FILE`): teacher-force chosen completions.

The tiny test model is random, so end-to-end tests of the capture proxy cannot wait for it to emit a
tool call. A script is a JSON list of rules `{"if_last_user_turn_contains": TEXT, "reply": TEXT}`.
When the decoded text of the prompt's last user turn (the text after the last `<|im_start|>user`,
or the whole prompt if the chat template has no such marker) contains a rule's TEXT, the first such
rule's reply is tokenized and teacher-forced, followed by the tokenizer's eos: the completion ends
with `finish_reason` "stop" (or "length" if max_tokens is shorter). Everything else about the row is
real: its logprobs are the model's own logprobs of the forced tokens, so spans look like sampled ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from transformers import PreTrainedTokenizerBase

USER_TURN_MARKER = "<|im_start|>user"


class ScriptRuleSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    if_last_user_turn_contains: str = Field(min_length=1)
    reply: str


@dataclass(frozen=True)
class ScriptRule:
    contains: str
    reply_ids: list[int]


class ScriptedReplies:
    def __init__(self, rules: list[ScriptRule], tokenizer: PreTrainedTokenizerBase) -> None:
        self.rules = rules
        self.tokenizer = tokenizer

    @classmethod
    def load(cls, path: Path, tokenizer: PreTrainedTokenizerBase) -> ScriptedReplies:
        specs = TypeAdapter(list[ScriptRuleSpec]).validate_json(path.read_bytes())
        eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
        rules = [
            ScriptRule(spec.if_last_user_turn_contains, tokenizer.encode(spec.reply, add_special_tokens=False) + eos)
            for spec in specs
        ]
        return cls(rules, tokenizer)

    def forced_reply(self, prompt: list[int]) -> list[int] | None:
        text = self.tokenizer.decode(prompt, skip_special_tokens=False)
        last_user_turn = text.rsplit(USER_TURN_MARKER, 1)[-1]
        for rule in self.rules:
            if rule.contains in last_user_turn:
                return rule.reply_ids
        return None
