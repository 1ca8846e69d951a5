"""The Porter stemmer (M. F. Porter, 1980), for lowercase ASCII words only.

A faithful port of the reference implementation's rules, with no dependencies. The
caller decides which tokens are stemmed at all (see ``_tokenize``): other scripts,
numbers and identifiers are never passed here, so the English rules cannot damage them.
"""

from __future__ import annotations

__all__ = ["porter_stem"]

_VOWELS = frozenset("aeiou")


class _Word:
    """Working state of one stemming run: the buffer ``b`` and its end ``k`` / mark ``j``."""

    __slots__ = ("b", "j", "k")

    def __init__(self, word: str) -> None:
        self.b = word
        self.k = len(word) - 1
        self.j = 0

    def cons(self, i: int) -> bool:
        ch = self.b[i]
        if ch in _VOWELS:
            return False
        if ch == "y":
            return i == 0 or not self.cons(i - 1)
        return True

    def m(self) -> int:
        """The number of vowel-consonant sequences in b[0..j]."""
        n = 0
        i = 0
        j = self.j
        while True:
            if i > j:
                return n
            if not self.cons(i):
                break
            i += 1
        i += 1
        while True:
            while True:
                if i > j:
                    return n
                if self.cons(i):
                    break
                i += 1
            i += 1
            n += 1
            while True:
                if i > j:
                    return n
                if not self.cons(i):
                    break
                i += 1
            i += 1

    def vowel_in_stem(self) -> bool:
        return any(not self.cons(i) for i in range(self.j + 1))

    def double_c(self, j: int) -> bool:
        return j >= 1 and self.b[j] == self.b[j - 1] and self.cons(j)

    def cvc(self, i: int) -> bool:
        if i < 2 or not self.cons(i) or self.cons(i - 1) or not self.cons(i - 2):
            return False
        return self.b[i] not in "wxy"

    def ends(self, suffix: str) -> bool:
        length = len(suffix)
        if length > self.k + 1 or self.b[self.k - length + 1 : self.k + 1] != suffix:
            return False
        self.j = self.k - length
        return True

    def set_to(self, text: str) -> None:
        self.b = self.b[: self.j + 1] + text
        self.k = self.j + len(text)

    def r(self, text: str) -> None:
        if self.m() > 0:
            self.set_to(text)

    def step1ab(self) -> None:
        if self.b[self.k] == "s":
            if self.ends("sses"):
                self.k -= 2
            elif self.ends("ies"):
                self.set_to("i")
            elif self.b[self.k - 1] != "s":
                self.k -= 1
        self.b = self.b[: self.k + 1]
        if self.ends("eed"):
            if self.m() > 0:
                self.k -= 1
        elif (self.ends("ed") or self.ends("ing")) and self.vowel_in_stem():
            self.k = self.j
            self.b = self.b[: self.k + 1]
            if self.ends("at"):
                self.set_to("ate")
            elif self.ends("bl"):
                self.set_to("ble")
            elif self.ends("iz"):
                self.set_to("ize")
            elif self.double_c(self.k):
                if self.b[self.k] not in "lsz":
                    self.k -= 1
            elif self.m() == 1 and self.cvc(self.k):
                self.j = self.k
                self.set_to("e")
        self.b = self.b[: self.k + 1]

    def step1c(self) -> None:
        if self.ends("y") and self.vowel_in_stem():
            self.b = self.b[: self.k] + "i"

    def step2(self) -> None:
        for suffix, replacement in _STEP2.get(self.b[self.k - 1] if self.k else "", ()):
            if self.ends(suffix):
                self.r(replacement)
                return

    def step3(self) -> None:
        for suffix, replacement in _STEP3.get(self.b[self.k], ()):
            if self.ends(suffix):
                self.r(replacement)
                return

    def step4(self) -> None:
        for suffix in _STEP4.get(self.b[self.k - 1] if self.k else "", ()):
            if self.ends(suffix):
                if suffix == "ion" and not (self.j >= 0 and self.b[self.j] in "st"):
                    return
                break
        else:
            return
        if self.m() > 1:
            self.k = self.j
            self.b = self.b[: self.k + 1]

    def step5(self) -> None:
        self.j = self.k
        if self.b[self.k] == "e":
            a = self.m()
            if a > 1 or (a == 1 and not self.cvc(self.k - 1)):
                self.k -= 1
        if self.b[self.k] == "l" and self.double_c(self.k) and self.m() > 1:
            self.k -= 1
        self.b = self.b[: self.k + 1]


_STEP2: dict[str, tuple[tuple[str, str], ...]] = {
    "a": (("ational", "ate"), ("tional", "tion")),
    "c": (("enci", "ence"), ("anci", "ance")),
    "e": (("izer", "ize"),),
    "l": (("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"), ("ousli", "ous")),
    "o": (("ization", "ize"), ("ation", "ate"), ("ator", "ate")),
    "s": (("alism", "al"), ("iveness", "ive"), ("fulness", "ful"), ("ousness", "ous")),
    "t": (("aliti", "al"), ("iviti", "ive"), ("biliti", "ble")),
    "g": (("logi", "log"),),
}
_STEP3: dict[str, tuple[tuple[str, str], ...]] = {
    "e": (("icate", "ic"), ("ative", ""), ("alize", "al")),
    "i": (("iciti", "ic"),),
    "l": (("ical", "ic"), ("ful", "")),
    "s": (("ness", ""),),
}
_STEP4: dict[str, tuple[str, ...]] = {
    "a": ("al",),
    "c": ("ance", "ence"),
    "e": ("er",),
    "i": ("ic",),
    "l": ("able", "ible"),
    "n": ("ant", "ement", "ment", "ent"),
    "o": ("ion", "ou"),
    "s": ("ism",),
    "t": ("ate", "iti"),
    "u": ("ous",),
    "v": ("ive",),
    "z": ("ize",),
}


def porter_stem(word: str) -> str:
    """The Porter stem of a lowercase ASCII word; words of 1-2 letters are left alone."""
    if len(word) <= 2:
        return word
    state = _Word(word)
    state.step1ab()
    if state.k > 0:
        state.step1c()
        state.step2()
        state.step3()
        state.step4()
        state.step5()
    return state.b[: state.k + 1]
