"""Make the small self-written document pools for a local 100-LongBench run (deterministic).

    python jobs/data/longbench100/make_fixtures.py [out_dir]

writes ``sources.jsonl`` and ``distractors.jsonl`` (the pool format of
:mod:`raylc.suites.context`). All text is generated from word lists about invented places and
people (so no model can know the answers beforehand):

* sources: 50 single-document QA rows (``question``, ``answers``: the answer appears verbatim in
  the text), 30 two-document QA groups (the answer needs both documents), 50 single documents
  with a ``summary`` (the summary restates the document's key sentences), 30 three-document
  groups with one ``summary``;
* distractors: 300 documents from eight fields, about 70 to 1,800 tokens.

Every document fits in 2,048 tokens of the default tokenizer (with room for distractors), and the
distractors are enough for contexts of 32K tokens.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

SEED = 20250101
SYLLABLES = ["va", "lor", "mek", "ti", "bran", "sel", "dor", "qua", "fen", "ri", "mo", "zan", "thel", "ka", "vir",
             "os", "pel", "un", "gra", "dis", "nor", "be", "cal", "wy", "ister", "aum", "rok", "le", "sha", "tor"]

# per field: a name line, then four indented lists ("; "-separated, continued on lines indented by four) of
# subjects, verbs, objects and endings
_FIELD_TABLE = """
history
  The old chronicle; A regional archive; The court historian; An early traveller; The abbey record;
    A merchant's diary; The census office; A later commentator
  describes; mentions; questions; summarizes; records; disputes; explains; lists
  the founding of the market; a long dispute over grazing rights; the rebuilding of the walls;
    the arrival of the salt traders; a harsh winter and its famine; the first written town law;
    the decline of the river trade; a treaty between two valleys
  in great detail; with some hesitation; in a single paragraph; from a distant point of view;
    using older sources; without naming its sources; for the first time; with obvious bias
science
  The research team; A small laboratory; The field survey; An independent review; The second experiment;
    A student project; The measuring station; The pilot study
  observed; measured; estimated; compared; reported; modelled; tested; confirmed
  the growth rate of the moss samples; seasonal changes in the lake temperature; the hardness of the local clay;
    the migration of the marsh birds; soil acidity near the mine; the decay of fallen leaves;
    the flow of the underground spring; pollen counts in early spring
  over three seasons; with simple instruments; under controlled conditions; at four sites;
    against earlier estimates; with mixed results; twice a week; during the dry months
cooking
  The head cook; A family recipe; The village bakery; An old cookbook; The market stall; A travelling chef;
    The inn kitchen; A guest at the festival
  recommends; prepares; warns against; improves; describes; serves; simplifies; praises
  a stew of barley and smoked fish; bread baked with roasted chestnuts; a sour plum sauce;
    pickled mountain greens; honey cakes with crushed seeds; a broth of wild mushrooms;
    dumplings filled with goat cheese; slow cooked river eel
  for cold evenings; with little salt; on feast days; in a clay pot; over an open fire; for large gatherings;
    after the harvest; with fresh herbs
sports
  The home team; A young runner; The rowing club; The coach; The visiting side; A veteran archer;
    The youth league; The referee
  won; lost; trained for; prepared; dominated; postponed; remembered; analysed
  the spring regatta; the final match of the season; the long distance race; the archery contest;
    a friendly game against the neighbours; the mountain relay; the winter tournament; the qualifying round
  in heavy rain; by a narrow margin; in front of a large crowd; after a slow start; without its captain;
    for the third year in a row; on a muddy field; late in the evening
geography
  The northern ridge; A narrow valley; The coastal plain; The river delta; An inland lake; The eastern forest;
    A chain of islands; The high plateau
  separates; shelters; borders; feeds; connects; overlooks; drains; surrounds
  the two largest farming districts; a string of fishing villages; the old trade road; several small marshes;
    the only mountain pass; the salt flats; a quiet harbour; wide fields of barley
  for most of the year; in a long curve; from north to south; during the flood season; almost entirely;
    at its narrowest point; on clear days; since ancient times
technology
  The new water mill; A clockmaker; The printing workshop; The rope factory; An inventor; The signal tower;
    A glassworks; The bridge engineers
  introduced; repaired; designed; replaced; tested; automated; documented; abandoned
  a faster loom; a gear system for the pumps; a cheaper way to make lenses; a lock for the canal;
    a brake for the heavy carts; a lamp that burns fish oil; a press for olive oil;
    a pulley for the harbour cranes
  after many failures; with borrowed money; within a year; for the town council; in secret; to great acclaim;
    with help from apprentices; at a modest cost
finance
  The town treasury; A cloth merchant; The grain exchange; The guild of carters; A local lender;
    The harbour office; The tax collector; A group of farmers
  raised; reduced; invested in; borrowed against; audited; reported; doubled; froze
  the price of wool; the fees for the market stalls; a fund for the new granary; the debts of the mill;
    the accounts of the toll bridge; the wages of the dock workers; the annual budget;
    the rent of the river warehouses
  at the start of the year; after a poor harvest; without warning; by a small amount;
    for the first time in a decade; under pressure from the guilds; in two stages; with the council's approval
music
  The town choir; A wandering fiddler; The brass band; A young composer; The music school;
    The cathedral organist; A folk singer; The dance hall
  performed; rehearsed; rewrote; collected; recorded; taught; revived; premiered
  a cycle of harvest songs; an old sailors' ballad; a march for the spring parade;
    lullabies from the hill villages; a piece for three flutes; the anthem of the guild; a set of wedding dances;
    a requiem for the drowned fishermen
  to a full hall; for the visiting duke; in the open air; with new harmonies; from memory; over several evenings;
    for the first time in years; at the winter fair
"""


def _fields(table: str) -> dict[str, tuple[list[str], ...]]:
    out: dict[str, list[list[str]]] = {}
    for line in table.strip().splitlines():
        if line.startswith("    "):
            out[name][-1] += line.strip().rstrip(";").split("; ")
        elif line.startswith("  "):
            out[name].append(line.strip().rstrip(";").split("; "))
        else:
            name = line.strip()
            out[name] = []
    return {k: tuple(v) for k, v in out.items()}


FIELDS = _fields(_FIELD_TABLE)
GOODS = ["amber", "wool", "salt", "copper wire", "dried figs", "blue dye", "cedar planks", "goat cheese",
         "glass beads", "smoked eel", "linen", "honey", "slate tiles", "rope", "walnut oil", "clay pipes"]
FACILITIES = ["library", "covered market", "harbour wall", "school", "bath house", "granary", "bridge",
              "hospital"]
ALTERNATIVES = ["repairing the roads", "the orphanage", "flood defences", "lower taxes", "the fishing fleet",
                "street lighting", "the old theatre", "clean wells"]
PLACES = ["old mill", "north gate", "river bend", "fish market", "east meadow", "chapel square", "lime kilns",
          "timber yard"]
EVENTS = ["lantern festival", "autumn fair", "boat race", "harvest parade", "winter market", "kite contest"]


class Writer:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.used: set[str] = set()

    def name(self, parts: tuple[int, int] = (2, 3)) -> str:
        while True:
            n = self.rng.randint(*parts)
            word = "".join(self.rng.choice(SYLLABLES) for _ in range(n)).capitalize()
            if word not in self.used and len(word) > 3:
                self.used.add(word)
                return word

    def person(self) -> str:
        return f"{self.name((2, 2))} {self.name()}"

    def sentence(self, field: str) -> str:
        s, v, o, t = (self.rng.choice(x) for x in FIELDS[field])
        return f"{s} {v} {o} {t}."

    def body(self, field: str, n: int, facts: list[str] = ()) -> str:
        """``n`` filler sentences of ``field`` in paragraphs of 3-7, with ``facts`` at random places."""
        sentences = [self.sentence(field) for _ in range(n)]
        for fact in facts:
            sentences.insert(self.rng.randint(0, len(sentences)), fact)
        paragraphs, i = [], 0
        while i < len(sentences):
            k = self.rng.randint(3, 7)
            paragraphs.append(" ".join(sentences[i:i + k]))
            i += k
        return "\n\n".join(paragraphs)

    def field(self) -> str:
        return self.rng.choice(sorted(FIELDS))


def qa_doc(w: Writer, i: int) -> dict:
    town, person, field = w.name(), w.person(), w.field()
    kind = i % 5
    if kind == 0:
        year = w.rng.randint(1200, 1850)
        fact = f"The town of {town} was founded in {year} by {person}."
        q, a = f"Who founded the town of {town}?", [person]
    elif kind == 1:
        n = w.rng.randint(40, 900)
        fact = f"The stone bridge of {town} is {n} meters long."
        q, a = f"How long is the stone bridge of {town}?", [f"{n} meters", f"{n} m"]
    elif kind == 2:
        horse = w.name()
        fact = f"{person} won the great race of {town} riding a horse named {horse}."
        q, a = f"What was the name of the horse {person} rode to win the great race of {town}?", [horse]
    elif kind == 3:
        good = w.rng.choice(GOODS)
        fact = f"The main export of {town} is {good}."
        q, a = f"What is the main export of {town}?", [good]
    else:
        n = w.rng.randint(100, 9000)
        fact = f"The library of {town} holds {n} manuscripts."
        q, a = f"How many manuscripts does the library of {town} hold?", [str(n)]
    text = f"{town}: notes on {field}\n\n" + w.body(field, w.rng.randint(12, 80), [fact])
    return {"id": f"qa-{i:03d}", "text": text, "question": q, "answers": a}


def multi_qa_group(w: Writer, i: int) -> list[dict]:
    field_a, field_b = w.field(), w.field()
    if i % 2 == 0:
        student, master, village = w.person(), w.person(), w.name()
        good = w.rng.choice(GOODS)
        fa = f"{student} trained for many years under the sculptor {master}."
        fb = f"{master} was born in {village}, a village known for its {good}."
        q, a = f"In which village was the teacher of {student} born?", [village]
    else:
        company, buyer, city = w.name(), w.name(), w.name()
        year = w.rng.randint(1700, 1900)
        fa = f"The trading house {company} was bought by the {buyer} company in {year}."
        fb = f"The {buyer} company has its headquarters in the city of {city}."
        q, a = f"In which city is the headquarters of the company that bought the trading house {company}?", [city]
    group = f"mqa-{i:03d}"
    docs = [(fa, field_a), (fb, field_b)]
    return [{"id": f"{group}-{j}", "group": group, "question": q, "answers": a,
             "text": f"{w.name()}: notes on {field}\n\n" + w.body(field, w.rng.randint(8, 40), [fact])}
            for j, (fact, field) in enumerate(docs)]


def report_facts(w: Writer) -> tuple[str, list[str], str]:
    """(title, key sentences, summary) of an invented council decision."""
    town, critic = w.name(), w.person()
    facility, alt, place = w.rng.choice(FACILITIES), w.rng.choice(ALTERNATIVES), w.rng.choice(PLACES)
    yes = w.rng.randint(7, 15)
    no = w.rng.randint(1, yes - 1)
    cost, year = w.rng.randint(2, 90), w.rng.randint(1800, 1950)
    facts = [f"The council of {town} voted {yes} to {no} to build a new {facility}.",
             f"The work will cost {cost} thousand crowns and should be finished by {year}.",
             f"Critics led by {critic} argued that the money should go to {alt} instead.",
             f"Building will start in the spring near the {place}."]
    summary = (f"The council of {town} approved a new {facility} by {yes} votes to {no}. "
               f"It will cost {cost} thousand crowns, be built near the {place} from the spring and be finished "
               f"by {year}. Critics around {critic} wanted the money spent on {alt}.")
    return f"{town} council report", facts, summary


def sum_doc(w: Writer, i: int) -> dict:
    title, facts, summary = report_facts(w)
    field = w.field()
    return {"id": f"sum-{i:03d}", "text": f"{title}\n\n" + w.body(field, w.rng.randint(12, 80), facts),
            "summary": summary}


def multi_sum_group(w: Writer, i: int) -> list[dict]:
    town, event, organiser = w.name(), w.rng.choice(EVENTS), w.person()
    visitors, winner, prize = w.rng.randint(2, 40), w.person(), w.rng.choice(GOODS)
    day = w.rng.choice(["first", "second", "third", "last"])
    facts = [
        [f"The {event} of {town} was organised this year by {organiser}.",
         f"About {visitors} hundred visitors came to the {event} of {town}."],
        [f"The main prize of the {event} in {town} went to {winner}.",
         f"{winner} received a cart of {prize} as the prize."],
        [f"Heavy rain on the {day} day of the {event} in {town} closed the river stalls.",
         f"{organiser} promised a covered hall for the next {event}."],
    ]
    summary = (f"The {event} of {town}, organised by {organiser}, drew about {visitors} hundred visitors. "
               f"{winner} won the main prize, a cart of {prize}. Rain closed the river stalls on the {day} day, "
               f"and {organiser} promised a covered hall for the next {event}.")
    group = f"msum-{i:03d}"
    out = []
    for j, f in enumerate(facts):
        field = w.field()
        text = f"{town} {event}, report {j + 1}\n\n" + w.body(field, w.rng.randint(8, 30), f)
        out.append({"id": f"{group}-{j}", "group": group, "text": text, "summary": summary})
    return out


def distractor(w: Writer, i: int) -> dict:
    field = w.field()
    n = int(w.rng.choice([w.rng.randint(4, 20), w.rng.randint(20, 60), w.rng.randint(60, 120)]))
    return {"id": f"d-{i:03d}", "text": f"{w.name()}: notes on {field}\n\n" + w.body(field, n)}


def make(out: Path) -> None:
    w = Writer(SEED)
    kinds = [[qa_doc(w, i)] for i in range(50)], [multi_qa_group(w, i) for i in range(30)], \
        [[sum_doc(w, i)] for i in range(50)], [multi_sum_group(w, i) for i in range(30)]
    # interleave the kinds (every field then shows up within the first rows: JSON-lines readers
    # infer the schema from the first rows only) and write every field on every row
    keys = ("id", "text", "question", "answers", "summary", "group")
    sources = [{k: row.get(k) for k in keys}
               for j in range(max(map(len, kinds))) for kind in kinds if j < len(kind) for row in kind[j]]
    distractors = [distractor(w, i) for i in range(300)]
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("sources.jsonl", sources), ("distractors.jsonl", distractors)):
        with open(out / name, "w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    make(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)
