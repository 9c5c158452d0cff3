"""Text around the engine: tokenizer, chat templates, incremental detokenizer, stop strings."""

from inference.text.chat_template import ChatTemplateRenderer, render_chat_template
from inference.text.detokenizer import IncrementalDetokenizer
from inference.text.stop import StopStringMatcher
from inference.text.tokenizer import Tokenizer

__all__ = [
    "ChatTemplateRenderer",
    "IncrementalDetokenizer",
    "StopStringMatcher",
    "Tokenizer",
    "render_chat_template",
]
