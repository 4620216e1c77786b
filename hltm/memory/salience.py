"""What a node's own texts are about: sentences and terms ranked by salience, in any domain.

A term is salient in a node when it recurs in the node's texts but not in all of them (tf·idf
over the node's own documents, stop words of English and Russian left out); a sentence is
salient when it is dense in salient terms. The offline QA pairs and summaries are extracts
ranked this way, each sentence kept with the id of the document it came from, so what the
retrievers find is the node's own content (a chat turn, a posting's pay line), not a template.

Deterministic: every ranking breaks ties on position.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from dataclasses import dataclass

from hltm.memory import lexicon as lx

_STOP = frozenset(
    """a about above after again against all also am an and any are as at be because been before
    being below between both but by can could did do does doing done down during each else
    even ever every few for from further get gets getting got had has have having he her here
    hers herself him himself his how i if in into is it its itself just let like lot lots made
    make many may me might more most much must my myself no nor not now of off oft on once one
    only or other our ours ourselves out over own really said same say says see she should so
    some such than thank thanks that the their theirs them themselves then there these they
    thing things this those though through to too under until up upon us very was way we well
    were what when where which while who whom why will with would yeah yes yet you your yours
    yourself yourselves oh hey hi wow cool great good awesome glad sure okay ok know think
    going gonna want really totally definitely always never something anything everything
    someone anyone im ive youre youve youll youd hes shes weve theyre theyve thats
    whats theres heres lets dont doesnt didnt cant couldnt wont wouldnt isnt arent wasnt werent
    havent hasnt hadnt shouldnt и в во не что он на я с со как а то все она так его но да ты к у же вы за
    бы по только ее мне было вот от меня еще нет о из ему теперь когда даже ну вдруг ли если
    уже или ни быть был него до вас нибудь опять уж вам ведь там потом себя ничего ей может
    они тут где есть надо ней для мы тебя их чем была сам чтоб без будто чего раз тоже себе
    под будет ж тогда кто этот того потому этого какой совсем ним здесь этом один почти мой
    тем чтобы нее сейчас были куда зачем всех никогда можно при наконец два об другой хоть
    после над больше тот через эти нас про всего них какая много разве три эту моя впрочем
    хорошо свою этой перед иногда лучше чуть том нельзя такой им более всегда конечно всю
    между""".split()  # noqa: SIM905 (a word list reads better as text)
)
_TOKEN = re.compile(r"[A-Za-zА-Яа-яЁё][\w'’+#-]*|\d{4}")


_CLITIC = re.compile(r"['’](?:s|m|ve|re|ll|d)$")


@functools.lru_cache(maxsize=1 << 16)  # words recur: every query and build reads the same ones
def _word(raw: str) -> str:
    """A token casefolded, without its possessive or contraction (`Caroline's` → caroline,
    `I'm` → im, `thinkin'` → thinkin)."""
    word = raw.casefold().strip("'’-")
    word = _CLITIC.sub(lambda m: "" if m.group(0)[1:] == "s" else m.group(0)[1:], word)
    return word.replace("'", "").replace("’", "").replace("n't", "nt")


def terms(text: str) -> list[str]:
    """Content terms of `text`, casefolded, stop words and one-letter words out."""
    out = []
    for raw in _TOKEN.findall(text):
        word = _word(raw)
        if len(word) > 1 and word not in _STOP:
            out.append(word)
    return out


@dataclass(frozen=True)
class Unit:
    """One sentence of a node's texts, with where it came from."""

    source: str
    position: int  # order of appearance across the node's texts
    text: str
    speaker: str  # "" unless the text is a speaker's turn (`Caroline: …`)


def units(sources: list[tuple[str, str]], speakers: frozenset[str]) -> list[Unit]:
    """Sentences of (source id, text) pairs; a turn's speaker label is kept apart from its words."""
    out: list[Unit] = []
    for source, text in sources:
        speaker = ""
        label = re.match(r"^\s*([^:\n]{1,40}):\s*", text)
        if label and label.group(1).strip().casefold() in speakers:
            speaker, text = label.group(1).strip(), text[label.end() :]
        for sentence, _ in lx.sentences(text):
            if terms(sentence):
                out.append(Unit(source, len(out), sentence, speaker))
    return out


class Salience:
    """tf·idf weights of the node's terms, with each document as one 'document' for idf."""

    def __init__(self, items: list[Unit]) -> None:
        self.tf: Counter[str] = Counter()
        df: Counter[str] = Counter()
        by_source: dict[str, set[str]] = {}
        self.speakers = sorted({u.speaker for u in items if u.speaker})
        for unit in items:
            words = terms(unit.text)
            self.tf.update(words)
            by_source.setdefault(unit.source, set()).update(words)
        for words in by_source.values():
            df.update(words)
        n = max(1, len(by_source))
        self.weight = {
            t: (1 + math.log(c)) * math.log(1 + (n + 1) / (df[t] + 0.5)) for t, c in self.tf.items()
        }

    def of_sentence(self, text: str) -> float:
        words = set(terms(text))
        if not words:
            return 0.0
        return round(sum(self.weight.get(w, 0.0) for w in words) / math.sqrt(len(words) + 2), 6)

    def top_terms(self, items: list[Unit], k: int) -> list[str]:
        """The k most salient terms of `items`, in the surface form they first appear in."""
        local: Counter[str] = Counter()
        surface: dict[str, str] = {}
        first: dict[str, int] = {}
        # Speakers are named in the question already, and name each other in their turns.
        speakers = {_word(part) for name in self.speakers for part in name.split()}
        for unit in items:
            for raw in _TOKEN.findall(unit.text):
                word = _word(raw)
                if len(word) > 1 and word not in _STOP and word not in speakers:
                    local[word] += 1
                    surface.setdefault(word, raw.strip("'’-"))
                    first.setdefault(word, len(first))
        ranked = sorted(
            local, key=lambda w: (-round(local[w] * self.weight.get(w, 0.0), 6), first[w])
        )
        return [surface[w] for w in ranked[:k]]

    def best(self, items: list[Unit], k: int) -> list[Unit]:
        """The k most salient units, returned in their original order."""
        ranked = sorted(items, key=lambda u: (-self.of_sentence(u.text), u.position))[:k]
        return sorted(ranked, key=lambda u: u.position)
