"""Structured outputs: grammars compiled by llguidance, matchers per sequence, token masks."""

from inference.grammar.spec import KINDS, Constraint, GrammarError

__all__ = ["KINDS", "Constraint", "GrammarError"]
