"""Layouts suite: short original documents whose evidence layout is known by construction.

Each problem is a guide to a fictional town in ``paragraphs`` paragraphs (the units). The
asked fact is invented (who runs a shop, how many books a library holds, the name of a boat,
the name of a person in a post), so a closed-book answer is a guess; the other paragraphs are
about the town (its weather, market, river, ...), each on a topic of its own, and name no
person, boat or number. Every kind of problem (``kinds``, one task each) places the fact in a
designed layout:

==================  ==========  =====================================================================
kind                designed    layout
==================  ==========  =====================================================================
``lookup``          λ 1, k 1    one paragraph states the fact; no other names its subject or answer
``repeated``        λ 1, k 2-3  the fact stated in ``copies`` paragraphs, worded differently, none
                                adjacent to another
``closed_book``     λ 0         a general-knowledge question (the capital of France); the paragraphs
                                are about the town and hold no answer
``two_paragraphs``  λ 2, k 1    a full name split over two adjacent paragraphs (first name in one,
                                last name in the next): the reference is in neither alone
==================  ==========  =====================================================================

With the exponential lengths C = 1, 2, 5 (lambda_p = k_p = 1) these are categories III, II, I
and IV. The answer (normalized as SubEM normalizes it) occurs in exactly the evidence
paragraphs of a lookup or a repeated fact, in none of a closed-book or two-paragraph problem's.
Names, numbers, places, sentence templates and the paragraphs' order are drawn from the seed;
problem ``i`` of a kind depends only on (seed, kind, i). Prompts use the ``qa`` template
(DOLCE Appendix E, with "Unanswerable").
"""

from __future__ import annotations

from typing import Callable, Literal

import numpy as np
import polars as pl
from pydantic import Field, field_validator, model_validator

from raylc.io.schemas import declare
from raylc.suites.registry import DOLCE_LENGTHS, PROBE_BUDGET, DolceSuite, SuiteInfo, Task, register_suite

Kind = Literal["lookup", "repeated", "closed_book", "two_paragraphs"]
#: every kind, in the order that seeds them (a kind's problems do not change with the others listed)
KINDS: tuple[str, ...] = ("lookup", "repeated", "closed_book", "two_paragraphs")
SEPARATOR = "\n\n"


class LayoutsSuite(DolceSuite):
    """Generated documents of known evidence layout (:mod:`raylc.suites.layouts`): ``kinds`` (one
    task each) of ``problems_per_kind`` problems, each a context of ``paragraphs`` paragraphs (the
    units); a ``repeated`` fact is stated in k paragraphs, k drawn from ``copies``."""

    kind: Literal["layouts"] = Field(default="layouts", description=(
        "`layouts`: generated documents of known evidence layout, for real models."))
    kinds: list[Kind] = Field(default=list(KINDS), min_length=1, description=(
        "The layouts to build, one task each (`lookup`, `repeated`, `closed_book`, `two_paragraphs`)."))
    problems_per_kind: int = Field(default=16, ge=1, le=10_000, description="Problems per kind.")
    paragraphs: int = Field(default=7, ge=3, le=12, description="Paragraphs (units) per document.")
    copies: list[int] = Field(default=[2, 3], min_length=1, description=(
        "The numbers of paragraphs a `repeated` fact is stated in (k), each 2 or 3 (its three wordings)."))

    columns = declare(
        ("unit_spec", pl.String, "The unit spec: `b` (paragraphs)."),
        ("evidence_starts", pl.List(pl.Int64), "The paragraphs that hold the evidence."))

    @field_validator("kinds")
    @classmethod
    def _distinct_kinds(cls, v: list[str]) -> list[str]:
        twice = sorted({k for k in v if v.count(k) > 1})
        if twice:
            raise ValueError(f"kind {twice[0]!r} is listed twice")
        return v

    @field_validator("copies")
    @classmethod
    def _copies(cls, v: list[int]) -> list[int]:
        if any(k < 2 for k in v):
            raise ValueError("every number of copies must be >= 2 (one copy is a lookup)")
        if any(k > Fact.WORDINGS for k in v):
            raise ValueError(f"every number of copies must be <= {Fact.WORDINGS} (a repeated fact has "
                             f"{Fact.WORDINGS} wordings, one per paragraph)")
        return sorted(set(v))

    @model_validator(mode="after")
    def _room(self) -> "LayoutsSuite":
        need = 2 * max(self.copies) - 1
        if "repeated" in self.kinds and self.paragraphs < need:
            raise ValueError(f"paragraphs must be >= {need} for {max(self.copies)} non-adjacent copies "
                             f"(got {self.paragraphs})")
        return self


# --------------------------------------------------------------------------------------------- #
# Vocabulary: invented names; no word holds a closed-book answer (tests/suites/test_layouts.py)
# --------------------------------------------------------------------------------------------- #

TOWNS = ["Harrowby", "Lenmouth", "Aldercombe", "Fennick", "Brackwater", "Quillhaven", "Tollbridge", "Wrenmoor",
         "Ashcote", "Saltmire", "Kelderby", "Pebbleford", "Pellworth", "Greywick", "Dunlow", "Hollinford",
         "Carrowdale", "Estmere", "Rookham", "Thistleby"]
WOMEN = ["Edith", "Hester", "Orla", "Ada", "Nell", "Rosalind", "Celia", "Greta", "Ottilie", "Maud", "Perpetua",
         "Winifred", "Isolde", "Leonie", "Theda", "Imelda", "Tamsin", "Verity", "Philippa", "Sabine"]
MEN = ["Tobias", "Silas", "Jasper", "Milo", "Ivo", "Bram", "Ansel", "Felix", "Rufus", "Cyril", "Lionel", "Ambrose",
       "Barnaby", "Caspian", "Osric", "Gideon", "Lucan", "Emrys", "Hugo", "Crispin"]
FIRST = WOMEN + MEN
LAST = ["Calloway", "Quillfeather", "Fenwick", "Ashdown", "Thistlewood", "Pellham", "Hollis", "Greaves", "Dunmore",
        "Treloar", "Kestrelby", "Varley", "Birchall", "Merriweather", "Oakhurst", "Penhallow", "Wainscott",
        "Ravensworth", "Tolliver", "Gosling", "Haverstock", "Fairbairn", "Blackadder", "Ludlow", "Cottingham",
        "Mabberley", "Swithin", "Trevanion", "Orpington", "Lockridge", "Pennyfeather", "Hazeldine", "Culpepper",
        "Winterbourne", "Featherstone", "Brannock", "Stalbridge", "Ellery", "Mortlake", "Sowerby"]
STREETS = ["Mill Lane", "Harbour Row", "Chapel Street", "Rope Walk", "Tanner's Yard", "Bell Street",
           "Plum Close", "Quay Street", "Weaver's Lane", "Kiln Road", "Salt Street", "Foundry Lane",
           "Cooper's Row", "Market Hill", "Castle Wynd", "Lantern Steps", "Netmaker's Alley", "Dyer Street",
           "Chandler's Court", "Barley Lane"]
SHOPS = ["bakery", "bookshop", "forge", "flower shop", "butcher's shop", "tea room", "hat shop", "clock shop",
         "cheese shop", "boatyard", "candle shop", "print shop", "pottery", "bicycle shop", "fishmonger's",
         "saddlery", "toy shop", "pharmacy", "barber's shop", "music shop"]
#: (building, what it counts, the verb, its base form)
COUNTS = [("library", "books", "holds", "hold"), ("school", "pupils", "teaches", "teach"),
          ("museum", "paintings", "shows", "show"), ("orchard", "apple trees", "has", "have"),
          ("choir", "singers", "has", "have"), ("marina", "berths", "has", "have"),
          ("cottage hospital", "beds", "has", "have"), ("cricket ground", "seats", "has", "have"),
          ("vineyard", "rows of vines", "has", "have"), ("abbey", "stained glass panes", "has", "have"),
          ("sheep farm", "ewes", "keeps", "keep"), ("brass band", "members", "has", "have"),
          ("beehive farm", "hives", "keeps", "keep"), ("rowing club", "oars", "owns", "own"),
          ("herb garden", "kinds of herbs", "grows", "grow")]
VESSELS = ["ferry", "mail boat", "lifeboat", "pleasure steamer", "dredger", "pilot boat", "oyster smack",
           "cargo barge", "tug", "fishing trawler"]
VESSEL_ADJ = ["Silver", "Brave", "Amber", "Quiet", "Lucky", "Northern", "Gentle", "Restless", "Patient", "Golden",
              "Humble", "Merry", "Steadfast", "Wandering", "Crimson", "Hopeful"]
VESSEL_NOUN = ["Gull", "Heron", "Curlew", "Petrel", "Kittiwake", "Plover", "Cormorant", "Tern", "Sandpiper",
               "Guillemot", "Shearwater", "Dunlin", "Lapwing", "Wagtail", "Osprey", "Puffin"]
PORTS = ["Ashcombe", "Port Venn", "Kilbride", "Marrowgate", "Selsey Head", "Trundle", "Holmport", "Ebbsfleet",
         "Cravenholm", "Wexley"]
#: (the post, the place it is held at)
POSTS = [("keeper", "the lighthouse on Cape Orrin"), ("harbour master", "the old harbour"),
         ("head gardener", "the gardens of Fell House"), ("station master", "the railway station"),
         ("warden", "the nature reserve on the salt meadows"), ("curator", "the Hall of Maps"),
         ("ranger", "the forest above the valley"), ("lock keeper", "the canal lock at Ember Weir"),
         ("bell ringer", "the church of Saint Aldhelm"), ("innkeeper", "the Anchor Inn"),
         ("miller", "the water mill on the Brenna"), ("ferryman", "the river crossing at Kell Ford")]
COUNT_WORDS = ["two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "twelve", "fifteen",
               "twenty", "thirty"]
HOURS = ["five", "six", "seven", "eight", "nine"]
MINUTES = ["twenty", "thirty", "forty", "fifty", "ninety"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
KIN = ["an uncle", "an aunt", "a grandmother", "a grandfather", "a cousin", "a neighbour", "an old friend"]

#: closed-book questions (with the references SubEM accepts) that SmolLM2-135M-Instruct answers
#: right with no context under the qa template (cluster/cpu/full_context_accuracy.py, --length 0)
CLOSED_BOOK = [
    ("What is the capital of France?", ["Paris"]),
    ("What is the capital of Italy?", ["Rome"]),
    ("What is the capital of Japan?", ["Tokyo"]),
    ("What is the capital of Germany?", ["Berlin"]),
    ("What is the capital of Spain?", ["Madrid"]),
    ("What is the capital of Russia?", ["Moscow"]),
    ("What is the capital of China?", ["Beijing"]),
    ("What is the capital of Egypt?", ["Cairo"]),
    ("What is the largest planet in the solar system?", ["Jupiter"]),
    ("What is the chemical symbol for water?", ["H2O"]),
    ("What gas do plants absorb from the air?", ["carbon dioxide"]),
    ("What is the largest ocean on Earth?", ["Pacific"]),
    ("What is the tallest mountain in the world?", ["Everest"]),
    ("What is the longest river in Africa?", ["Nile"]),
    ("What language is spoken in Brazil?", ["Portuguese"]),
    ("What language is spoken in Mexico?", ["Spanish"]),
    ("What currency is used in Japan?", ["yen"]),
    ("Which planet is known as the Red Planet?", ["Mars"]),
    ("In which country is the Eiffel Tower?", ["France"]),
]


# --------------------------------------------------------------------------------------------- #
# Facts: each draws its own names from the document's pools and says itself in several wordings
# --------------------------------------------------------------------------------------------- #


class _Pools:
    """The document's vocabulary, drawn without replacement: no two paragraphs share a name."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self._left: dict[str, list] = {}
        self.town = self.pick("towns", TOWNS)
        self.numbers = set()

    def pick(self, name: str, pool: list):
        if name not in self._left:
            self._left[name] = [pool[i] for i in self.rng.permutation(len(pool))]
        return self._left[name].pop()

    def one(self, pool: list):
        """A word that may recur (hours, days, kin): never part of an answer."""
        return pool[int(self.rng.integers(len(pool)))]

    def number(self) -> str:
        """A three-digit number no other paragraph of the document uses."""
        while True:
            n = int(self.rng.integers(120, 990))
            if n not in self.numbers:
                self.numbers.add(n)
                return str(n)

    def person(self) -> tuple[str, str]:
        return self.pick("first", FIRST), self.pick("last", LAST)


class Fact:
    """One fact of a document: ``question``, ``answers``, ``subject`` (the words that name what is
    asked about: no other paragraph has them) and ``paragraphs(n)``, n wordings of it: each a
    lead of :meth:`leads` that states the fact and two sentences of :meth:`details`."""

    question: str
    answers: list[str]
    subject: list[str]
    WORDINGS = 3

    def __init__(self, pools: _Pools):
        self.p = pools

    def leads(self) -> list[str]:
        """The fact in :data:`WORDINGS` wordings."""
        raise NotImplementedError

    def details(self) -> list[str]:
        """Sentences about the fact's subject that state nothing asked."""
        raise NotImplementedError

    def paragraph(self, wording: int) -> str:
        lead = self.leads()[wording]
        return f"{lead} {_sentences(self.p.rng, self.details(), 2)}"

    def paragraphs(self, n: int) -> list[str]:
        if n > self.WORDINGS:
            raise ValueError(f"a fact has {self.WORDINGS} wordings, not {n}")
        order = self.p.rng.permutation(self.WORDINGS)[:n]
        return [self.paragraph(int(w)) for w in order]


def _sentences(rng: np.random.Generator, pool: list[str], n: int) -> str:
    return " ".join(pool[i] for i in rng.choice(len(pool), size=n, replace=False))


class Shopkeeper(Fact):
    """Who runs the {shop} on {street}? -> a full name."""

    def __init__(self, pools: _Pools):
        super().__init__(pools)
        self.shop, self.street = pools.pick("shops", SHOPS), pools.pick("streets", STREETS)
        self.first, self.last = pools.person()
        self.name = f"{self.first} {self.last}"
        self.question = f"Who runs the {self.shop} on {self.street}?"
        self.answers = [self.name]
        self.subject = [self.shop, self.street]

    def leads(self) -> list[str]:
        p, shop, street, name = self.p, self.shop, self.street, self.name
        kin, years = p.one(KIN), p.one(COUNT_WORDS)
        return [f"The {shop} on {street} is run by {name}, who took it over from {kin} {years} years ago.",
                f"{name} runs the {shop} on {street} and has done so for {years} years.",
                f"On {street} stands the {shop}. It is run by {name}, who learned the trade from {kin}."]

    def details(self) -> list[str]:
        p = self.p
        hour, day = p.one(HOURS), p.one(DAYS)
        return [f"The door opens at {hour} in the morning, and on {day}s there is a queue outside.",
                "Walkers often stop there on their way up from the harbour.",
                "The windows are full of goods, and a small bell rings whenever the door opens.",
                "In winter the shop closes early, before the lamps are lit along the street.",
                f"The shop is said to be the oldest of its kind in {p.town}."]


class Count(Fact):
    """How many {things} does the {building} {verb}? -> a three-digit number."""

    def __init__(self, pools: _Pools):
        super().__init__(pools)
        self.building, self.things, self.verb, base = pools.pick("counts", COUNTS)
        self.n = pools.number()
        self.question = f"How many {self.things} does the {self.building} of {pools.town} {base}?"
        self.answers = [self.n]
        self.subject = [self.building, self.things]

    def leads(self) -> list[str]:
        b, things, verb, n = self.building, self.things, self.verb, self.n
        return [f"The {b} of {self.p.town} {verb} {n} {things}.",
                f"Today the {b} {verb} {n} {things}, more than at any time before.",
                f"There are {n} {things} at the {b}, which was opened by the town council long ago."]

    def details(self) -> list[str]:
        p = self.p
        return [f"It was started by a group of neighbours who met on {p.one(DAYS)} evenings.",
                "Volunteers look after it, and a small fee pays for repairs.",
                "Most visitors come in the summer, when the days are long.",
                "A painted sign at the gate tells its story in a few lines.",
                f"The people of {p.town} are proud of it and speak of it often."]


class Vessel(Fact):
    """What is the name of the {vessel} to {port}? -> its name."""

    def __init__(self, pools: _Pools):
        super().__init__(pools)
        self.vessel, self.port = pools.pick("vessels", VESSELS), pools.pick("ports", PORTS)
        self.boat = f"{pools.pick('adj', VESSEL_ADJ)} {pools.pick('noun', VESSEL_NOUN)}"
        self.question = f"What is the name of the {self.vessel} to {self.port}?"
        self.answers = [self.boat]
        self.subject = [self.vessel, self.port]

    def leads(self) -> list[str]:
        town, v, port, boat = self.p.town, self.vessel, self.port, self.boat
        return [f"The {v} that sails between {town} and {port} is called the {boat}.",
                f"Between {town} and {port} the {v} {boat} makes the crossing.",
                f"The {boat} is the {v} on the route from {town} to {port}."]

    def details(self) -> list[str]:
        p = self.p
        return [f"The crossing takes about {p.one(MINUTES)} minutes in calm weather.",
                "In winter storms it stays in harbour, sometimes for several days.",
                f"Its crew of {p.one(COUNT_WORDS[:6])} know every rock along the coast.",
                "Children wave to it from the sea wall as it leaves.",
                "It was painted again last spring, and its brass bell was polished."]


class SplitName(Fact):
    """What is the {post}'s full name? -> "First Last": the first name in one paragraph, the last
    name in the next ("Her last name is ..."), so that neither paragraph holds the full name."""

    def __init__(self, pools: _Pools):
        super().__init__(pools)
        self.post, self.place = pools.pick("posts", POSTS)
        self.first, self.last = pools.person()
        self.question = f"What is the {self.post}'s full name?"
        self.answers = [f"{self.first} {self.last}"]
        self.subject = [self.post, self.place]

    def pair(self) -> list[str]:
        p, rng = self.p, self.p.rng
        post, place, first, last = self.post, self.place, self.first, self.last
        her = "Her" if first in WOMEN else "His"
        one = [f"Everyone in {p.town} knows the {post} of {place}.",
               f"The {post} of {place} has lived in {p.town} for {p.one(COUNT_WORDS)} years.",
               f"Visitors to {place} soon meet its {post}."][int(rng.integers(3))]
        more = ["The work starts before dawn and ends long after dark.",
                f"Letters arrive every {p.one(DAYS)} with the carrier.",
                "On quiet evenings there is time to read by the fire."]
        return [f"{one} {her} first name is {first}.", f"{her} last name is {last}. {_sentences(rng, more, 1)}"]


FACTS: tuple[Callable[[_Pools], Fact], ...] = (Shopkeeper, Count, Vessel)


#: paragraphs about the town that name no person, boat or number: (opening, further sentences)
TOPICS: list[tuple[str, list[str]]] = [
    ("{town} grew up around a small natural harbour on a rocky coast.",
     ["Salt traders once landed their goods there and stayed for the winter.",
      "The oldest lanes still follow the paths the traders used.",
      "Most of the houses are built from grey stone taken from the cliffs.",
      "Its name is said to come from an old word for a sheltered bay."]),
    ("The weather in {town} changes quickly.",
     ["Fog often rolls in from the sea on {season} mornings.",
      "A strong wind can blow for days before the sky clears again.",
      "On calm evenings the water in the bay is as flat as glass.",
      "Old sailors say they can smell a storm a day before it comes."]),
    ("A market fills the square every {day}.",
     ["Farmers bring eggs, honeycomb and vegetables down from the hills.",
      "The stalls open at first light and are packed away by noon.",
      "Children spend their coins on toffee and paper kites.",
      "In bad weather the market moves under the arches of the old hall."]),
    ("A footpath climbs from the harbour to the top of the cliffs.",
     ["From the top, walkers can see the whole curve of the bay.",
      "Wild thyme and sea pinks grow along the edge of the path.",
      "A wooden bench halfway up gives tired walkers a rest.",
      "In {season} the path is muddy and few people use it."]),
    ("Every year in {month} the town holds a lantern festival.",
     ["Families carry paper lanterns down to the beach at dusk.",
      "Small candles are set floating on the water of the bay.",
      "The festival remembers the fishermen who were lost at sea long ago.",
      "Musicians play in the square until late at night."]),
    ("The river that runs through {town} rises in the moorland hills.",
     ["It reaches the sea beside the harbour wall.",
      "Trout can be seen in its clear pools in summer.",
      "After heavy rain it turns brown and floods the lower meadows.",
      "An old stone bridge with three arches crosses it near the square."]),
    ("The beach below the cliffs is covered with smooth grey pebbles.",
     ["At low tide rock pools appear, full of crabs and anemones.",
      "Driftwood collects at the high-water mark after every storm.",
      "In summer children build dams across the little streams that cross it.",
      "The pebbles roar softly as each wave draws back."]),
    ("Fishing was once the main trade of the town.",
     ["The catch was mostly herring, salted in barrels on the quay.",
      "Today only a handful of small boats still go out before dawn.",
      "Nets are still mended by hand on the harbour steps.",
      "The smell of tar and rope hangs over the waterfront."]),
    ("The roofs of {town} are covered with dark slate.",
     ["Chimneys lean in every direction after centuries of wind.",
      "Gulls nest on the roofs in spring and wake everyone at dawn.",
      "From the cliffs the roofs look like the scales of a fish.",
      "After rain the slates shine in the low evening sun."]),
    ("In the evenings people gather on the sea wall.",
     ["They talk about the weather, the tides and the price of coal.",
      "Young couples walk to the end of the breakwater and back.",
      "Dogs chase each other along the sand below.",
      "When the light fades, the lamps along the wall are lit one by one."]),
    ("A narrow road winds down into {town} from the moor.",
     ["It has so many bends that drivers are told to sound their horns.",
      "In {season} it is sometimes closed by snow or fallen trees.",
      "Hedges of hawthorn grow high on both sides.",
      "A bus comes down it twice a day, except on {day}s."]),
    ("The churchyard stands on a low hill above the houses.",
     ["Its yew trees are older than anyone can remember.",
      "Many of the gravestones are too worn to read.",
      "From the gate there is a view of the harbour and the open sea.",
      "Wild daffodils cover the slope in early spring."]),
]
MONTHS = ["March", "April", "May", "June", "July", "August", "September", "October", "November"]
SEASONS = ["autumn", "winter", "spring"]


def _filler(pools: _Pools) -> str:
    """A paragraph about the town on a topic no other paragraph of the document has."""
    opening, more = pools.pick("topics", TOPICS)
    text = " ".join([opening, *[more[i] for i in pools.rng.choice(len(more), size=2, replace=False)]])
    return text.format(town=pools.town, day=pools.one(DAYS), month=pools.one(MONTHS), season=pools.one(SEASONS))


def _non_adjacent(rng: np.random.Generator, L: int, k: int) -> list[int]:
    """k sorted positions in 0..L-1, no two adjacent, uniform over all such sets."""
    slots = np.sort(rng.choice(L - k + 1, size=k, replace=False))
    return [int(s) for s in slots + np.arange(k)]


def build_problem(kind: str, seed: int, index: int, paragraphs: int, copies: list[int]) -> dict:
    """Problem ``index`` of ``kind``: its paragraphs, question, answers, designed layout and
    ``subject`` (:class:`Fact`; not a column of the table)."""
    rng = np.random.default_rng([seed, KINDS.index(kind), index])
    pools = _Pools(rng)
    L = paragraphs
    units: list = [None] * L
    if kind == "closed_book":  # the n-th question of a seeded order: all of them before any repeats
        order = np.random.default_rng([seed, KINDS.index(kind)]).permutation(len(CLOSED_BOOK))
        question, answers = CLOSED_BOOK[int(order[index % len(CLOSED_BOOK)])]
        answers, starts, lam, k, subject = list(answers), [], 0, 0, []
    elif kind == "two_paragraphs":
        fact = SplitName(pools)
        start = int(rng.integers(L - 1))
        units[start : start + 2] = fact.pair()
        question, answers, starts, lam, k, subject = fact.question, fact.answers, [start], 2, 1, fact.subject
    else:
        fact = FACTS[int(rng.integers(len(FACTS)))](pools)
        k = 1 if kind == "lookup" else int(copies[int(rng.integers(len(copies)))])
        starts = _non_adjacent(rng, L, k)
        for s, text in zip(starts, fact.paragraphs(k)):
            units[s] = text
        question, answers, lam, subject = fact.question, fact.answers, 1, fact.subject
    units = [u if u is not None else _filler(pools) for u in units]
    return {"task": kind, "problem_id": f"{kind}-{index:03d}", "L": L, "units": units, "question": question,
            "answers": answers, "planted_lam": lam, "planted_k": k, "evidence_starts": starts, "subject": subject}


SCHEMA: dict[str, pl.DataType] = {
    "task": pl.String(), "problem_id": pl.String(), "L": pl.Int64(), "units": pl.List(pl.String()),
    "question": pl.String(), "answer": pl.String(), "answers": pl.List(pl.String()), "template": pl.String(),
    "unit_spec": pl.String(), "document": pl.String(), "unit_starts": pl.List(pl.Int64()),
    "unit_ends": pl.List(pl.Int64()), "planted_lam": pl.Int64(), "planted_k": pl.Int64(),
    "evidence_starts": pl.List(pl.Int64()),
}


_LAYOUTS_NOTE = {"lookup": "Designed lambda 1, k 1 (category III at C = 1, 2, 5).",
                 "repeated": "Designed lambda 1, k from `copies` (category II).",
                 "closed_book": "A general-knowledge question: lambda 0 (category I).",
                 "two_paragraphs": "A full name split over two adjacent paragraphs: lambda 2, k 1 (category IV)."}
LAYOUTS_INFO = SuiteInfo(
    title="Documents of known evidence layout",
    tasks=tuple(Task(kind, "the job's `scoring.metric` (the shipped job: `subem`)", PROBE_BUDGET,
                     "DOLCE Section 3 (no released code)", note=_LAYOUTS_NOTE[kind]) for kind in KINDS),
    lengths=DOLCE_LENGTHS,
    data="Nothing: the towns, facts and paragraphs are generated from the seed.",
    real_data="None needed.",
    official="DOLCE (no released code)",
)


@register_suite(LayoutsSuite, LAYOUTS_INFO)
def build_layouts(suite: LayoutsSuite, seed: int) -> pl.DataFrame:
    """The problems table (columns :data:`SCHEMA`; a documents suite's, with ``unit_spec`` ``b``
    and template ``qa``, plus the designed ``planted_lam, planted_k, evidence_starts``), in the
    order of ``kinds``. Deterministic per ``seed``."""
    rows = []
    for kind in suite.kinds:
        for i in range(suite.problems_per_kind):
            row = build_problem(kind, seed, i, suite.paragraphs, suite.copies)
            ends = np.cumsum([len(u) + len(SEPARATOR) for u in row["units"]]) - len(SEPARATOR)
            row.update(answer=row["answers"][0], template="qa", unit_spec="b",
                       document=SEPARATOR.join(row["units"]),
                       unit_starts=[int(e - len(u)) for e, u in zip(ends, row["units"])],
                       unit_ends=[int(e) for e in ends])
            rows.append(row)
    return pl.DataFrame(rows, schema=SCHEMA).select(list(SCHEMA))
