"""A small typed registry: select a policy implementation by name.

Config says ``placement: pack``; an unknown name raises an error listing the valid names
(as SkyPilot's registry and Ray Tune's ``create_scheduler`` do).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class UnknownPolicyError(ValueError):
    """A policy name that no registry entry has.

    Attributes:
        family: the policy family (``"placement"``, ...).
        name: the name asked for.
        valid: the names that exist.
    """

    def __init__(self, family: str, name: str, valid: list[str]) -> None:
        self.family = family
        self.name = name
        self.valid = valid
        super().__init__(f"unknown {family} policy {name!r}; valid: {', '.join(valid)}")


class Registry(Generic[T]):
    """Maps names to implementations of one policy family."""

    def __init__(self, family: str) -> None:
        self.family = family
        self._entries: dict[str, Callable[..., T]] = {}

    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        """Class decorator registering ``cls`` under ``name``."""

        def deco(cls: type[T]) -> type[T]:
            if name in self._entries:
                raise ValueError(f"{self.family} policy {name!r} registered twice")
            self._entries[name] = cls
            return cls

        return deco

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._entries)

    def name_of(self, policy: object) -> str:
        """The name ``policy`` is registered under, as users type it (``shared``), looking
        through wrappers that keep the policy they wrap as ``inner``; else its class name."""
        while not any(type(policy) is entry for entry in self._entries.values()):
            inner = getattr(policy, "inner", None)
            if inner is None:
                return type(policy).__name__
            policy = inner
        return next(name for name, entry in self._entries.items() if type(policy) is entry)

    def create(self, name: str, **kwargs: Any) -> T:
        """Instantiate the implementation registered as ``name``.

        Raises:
            UnknownPolicyError: no such name; the message lists the valid ones.
        """
        try:
            factory = self._entries[name]
        except KeyError:
            raise UnknownPolicyError(self.family, name, self.names()) from None
        return factory(**kwargs)
