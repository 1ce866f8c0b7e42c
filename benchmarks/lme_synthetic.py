"""A small dataset in LongMemEval's format, written for this project: NOT the real LongMemEval.

The real LongMemEval (Wu et al., ICLR 2025) cannot be downloaded here. This script builds data in its JSON format
(``question_id``, ``question_type``, ``question``, ``answer``, ``question_date``, ``haystack_session_ids``,
``haystack_dates``, ``haystack_sessions`` of ``{"role", "content", "has_answer"}`` turns, ``answer_session_ids``)
so that the loader, the strategies and leave-one-dataset-out checks can run on a second kind of conversation:
a user talking to an assistant, where the user mentions personal facts in passing, and first-person questions.

How it is built (deterministic for a seed):

* 48 facts written for this file, each a user sentence that states it, a question that paraphrases it (few words in
  common), and a type: single-session-user (24), multi-session (8 pairs of sentences in two sessions),
  knowledge-update (8: an old and a new sentence, both evidence) and temporal-reasoning (8: two dated events).
* 30 chat topics (cooking, code, travel, ...) with 4 user requests and 4 assistant replies each, also written
  here; a filler session is 2-4 request/reply rounds of one topic.
* Each question's haystack: 30 filler sessions drawn from a pool of 150, the sessions that hold its own evidence
  (the fact sentence as a user turn inside a topic session, ``has_answer`` true), and the evidence sessions of 4
  other facts as distractors; shuffled, then dated a few days apart over about six months.

Run: ``python benchmarks/lme_synthetic.py OUT.json [--seed 0]``.
"""

from __future__ import annotations

import argparse
import json
import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

# (type, question, answer, evidence sentences). Multi-session and temporal facts have two sentences (two
# sessions); knowledge-update facts list the old sentence first, the new one second.
FACTS: list[tuple[str, str, str, list[str]]] = [
    ("single-session-user", "What breed is the dog I adopted?", "greyhound",
     ["Quick aside, we finally brought home a retired racing greyhound from the rescue last weekend."]),
    ("single-session-user", "Where did I go on my honeymoon?", "Lisbon",
     ["My husband and I spent our honeymoon wandering around Lisbon, so I have a soft spot for custard tarts."]),
    ("single-session-user", "What instrument am I learning?", "cello",
     ["I've been taking cello lessons on Thursday evenings and my bowing is still pretty scratchy."]),
    ("single-session-user", "What is my sister's job?", "midwife",
     ["My sister works night shifts delivering babies at the county hospital, so she sleeps all day."]),
    ("single-session-user", "Which language am I studying?", "Korean",
     ["I'm trying to get through a Korean grammar workbook before my trip to Seoul."]),
    ("single-session-user", "What is my allergy?", "peanuts",
     ["I have to be careful with satay and most granola bars because peanuts make my throat swell up."]),
    ("single-session-user", "What car do I drive?", "a green Subaru Outback",
     ["My green Subaru Outback has almost two hundred thousand miles on it and still starts every winter."]),
    ("single-session-user", "What do I grow on my balcony?", "tomatoes and basil",
     ["The balcony is crammed with tomato plants and a few pots of basil this summer."]),
    ("single-session-user", "What is my favourite board game?", "Carcassonne",
     ["Whenever friends come over we end up playing Carcassonne until midnight."]),
    ("single-session-user", "How do I commute to work?", "by bike",
     ["I ride my bike along the canal path to the office every morning, rain or shine."]),
    ("single-session-user", "What is my cat called?", "Miso",
     ["Miso, my tabby, knocked a glass off the counter again this morning."]),
    ("single-session-user", "Which team do I support?", "Celtic",
     ["Watching Celtic lose the derby on Saturday ruined my whole weekend."]),
    ("single-session-user", "What did I study at university?", "marine biology",
     ["Back when I was doing my degree in marine biology I spent a whole summer counting sea urchins."]),
    ("single-session-user", "What is my daughter's name?", "Ines",
     ["Ines just lost her first tooth and is very proud of the gap."]),
    ("single-session-user", "Where was I born?", "Gdansk",
     ["I grew up in Gdansk, right by the shipyards, before we moved abroad."]),
    ("single-session-user", "What sport do I coach?", "under-12 basketball",
     ["On Saturdays I coach the under-12 basketball team at the community centre."]),
    ("single-session-user", "What medication do I take every morning?", "levothyroxine",
     ["I take my levothyroxine first thing every morning, half an hour before coffee."]),
    ("single-session-user", "What is the name of my podcast?", "Small Engines",
     ["I record a little podcast called Small Engines about fixing lawnmowers and scooters."]),
    ("single-session-user", "Which city do my parents live in?", "Tucson",
     ["My parents retired to Tucson and keep sending me photos of cacti."]),
    ("single-session-user", "What kind of cake did I bake for the party?", "lemon drizzle",
     ["For the party I made a lemon drizzle loaf and it disappeared in ten minutes."]),
    ("single-session-user", "What is my blood type?", "O negative",
     ["The clinic keeps calling me because O negative donors are always in demand."]),
    ("single-session-user", "Where do I volunteer?", "the animal shelter",
     ["Every other Sunday I walk dogs at the animal shelter near the ring road."]),
    ("single-session-user", "What is my running personal best for 10k?", "48 minutes",
     ["I finally broke 48 minutes on a 10k course last month."]),
    ("single-session-user", "Which novel am I reading?", "Middlemarch",
     ["I'm halfway through Middlemarch and Dorothea is driving me up the wall."]),
    ("multi-session", "How many pets do I have?", "two",
     ["We got a hamster for the kids, he lives in the hallway.",
      "Our old beagle still insists on two walks a day."]),
    ("multi-session", "Which two countries did I visit this year?", "Japan and Morocco",
     ["The temples in Kyoto were even quieter than I expected in early spring.",
      "In Marrakech I bought far too many ceramic bowls at the souk."]),
    ("multi-session", "What instruments do I play?", "ukulele and drums",
     ["I picked up a cheap ukulele at a garage sale and learned three chords.",
      "My neighbours have complained about my drum practice in the garage."]),
    ("multi-session", "Which languages do my children speak at school?", "French and Spanish",
     ["My son has French homework every night now.",
      "My daughter's Spanish teacher says her accent is excellent."]),
    ("multi-session", "What hobbies did I take up recently?", "pottery and climbing",
     ["I signed up for a pottery wheel class and my first bowl was lopsided.",
      "The bouldering gym opened near us and I've been going twice a week."]),
    ("multi-session", "How many marathons have I run?", "two",
     ["Running the Berlin marathon was the hardest thing I've done.",
      "Chicago was my second marathon and my legs were ruined for a week."]),
    ("multi-session", "Which relatives are visiting this summer?", "my aunt and my cousin",
     ["My aunt is flying in from Manila in July.",
      "My cousin will stay with us for a fortnight in August."]),
    ("multi-session", "What renovations have I done at home?", "a new kitchen floor and a repainted bathroom",
     ["We ripped out the old linoleum and laid oak planks in the kitchen.",
      "The bathroom is finally painted a pale green instead of that awful pink."]),
    ("knowledge-update", "Where do I work now?", "the public library",
     ["I work the early shift at a bakery, so I'm always up at four.",
      "Big news, I left the bakery and started as an assistant at the public library."]),
    ("knowledge-update", "How many hours a week do I work now?", "thirty",
     ["My contract is forty hours a week and it leaves me exhausted.",
      "I negotiated down to thirty hours a week, which is much better."]),
    ("knowledge-update", "What is my current phone?", "a Pixel",
     ["My old iPhone battery barely lasts until lunch.",
      "I switched to a Pixel and I'm still getting used to the gestures."]),
    ("knowledge-update", "Where do I live now?", "Leeds",
     ["Our flat in Manchester is tiny but the rent is fair.",
      "We finished moving to Leeds last weekend and the boxes are everywhere."]),
    ("knowledge-update", "What is my current weekly running distance?", "35 kilometres",
     ["I'm running about twenty kilometres a week at the moment.",
      "I've built up to thirty-five kilometres a week now."]),
    ("knowledge-update", "Which gym am I a member of now?", "the climbing gym",
     ["I renewed my membership at the leisure centre pool.",
      "I cancelled the pool membership and joined the climbing gym instead."]),
    ("knowledge-update", "What is my partner's current job?", "nurse",
     ["My partner is still teaching maths at the secondary school.",
      "My partner retrained and now works as a nurse on the cardiac ward."]),
    ("knowledge-update", "How old is my son now?", "seven",
     ["My son just turned six and wants a dinosaur cake.",
      "My son turned seven yesterday and suddenly thinks he's a teenager."]),
    ("temporal-reasoning", "Which came first, buying the tent or the camping trip to Skye?", "buying the tent",
     ["I bought a new two-person tent in the outdoor shop sale.",
      "We just got back from camping on Skye, the midges were brutal."]),
    ("temporal-reasoning", "How long after starting the new job did I get a promotion?", "about three months",
     ["Today was my first day at the design agency.",
      "I got promoted to senior designer at the agency this week."]),
    ("temporal-reasoning", "Did I sell the old bike before or after buying the e-bike?", "after",
     ["I treated myself to an e-bike for the hills.",
      "Someone finally bought my old road bike from the classifieds."]),
    ("temporal-reasoning", "How many weeks passed between my dentist appointment and the filling?", "about four",
     ["The dentist found a small cavity at my check-up.",
      "Had the filling done today, my jaw is still numb."]),
    ("temporal-reasoning", "Which happened first, the wedding or the house move?", "the wedding",
     ["Our wedding was small, just thirty people in a barn.",
      "We moved into the new house, and the garden is a jungle."]),
    ("temporal-reasoning", "How long did my kitchen renovation take?", "about two months",
     ["The builders started tearing out our kitchen this morning.",
      "The kitchen is finished at last, we cooked our first dinner in it."]),
    ("temporal-reasoning", "When did I adopt the kitten relative to my birthday?", "after my birthday",
     ["It was my birthday and my friends took me out for ramen.",
      "We adopted a tiny black kitten from a neighbour's litter."]),
    ("temporal-reasoning", "How many days was I in hospital?", "about a week",
     ["I was admitted to hospital with appendicitis.",
      "I was discharged from hospital and I'm recovering on the sofa."]),
]

# (topic, user requests, assistant replies), written for this file.
TOPICS: list[tuple[str, list[str], list[str]]] = [
    ("sourdough", ["How do I keep a sourdough starter alive?", "My loaf came out flat, what went wrong?",
                   "What hydration should a beginner use?", "Can I proof dough in the fridge overnight?"],
     ["Feed the starter equal weights of flour and water daily and keep it somewhere warm.",
      "A flat loaf usually means under-proofing or a weak starter; try a longer bulk ferment.",
      "Around seventy percent hydration is forgiving for a first loaf.",
      "Yes, a cold retard of eight to sixteen hours improves flavour and scoring."]),
    ("python", ["How do I reverse a list in Python?", "What does a list comprehension look like?",
                "Why does my loop skip elements when I remove them?", "How do I read a CSV file?"],
     ["Use reversed(items) for an iterator or items[::-1] for a copy.",
      "A comprehension is [expression for item in items if condition].",
      "Removing while iterating shifts the indexes; iterate over a copy instead.",
      "The csv module's DictReader gives you one dictionary per row."]),
    ("budget", ["Can you help me set up a monthly budget?", "What is the fifty thirty twenty rule?",
                "How much should an emergency fund hold?", "Is it worth tracking every coffee?"],
     ["Start by listing fixed costs, then variable spending, then savings goals.",
      "Half for needs, thirty percent for wants and twenty for saving or debt.",
      "Three to six months of essential expenses is a common target.",
      "Tracking small purchases for a month shows where the money leaks."]),
    ("travel", ["What should I pack for a week of hiking?", "How early should I get to the airport?",
                "Any tips for beating jet lag?", "Is travel insurance worth it?"],
     ["Layers, a waterproof shell, broken-in boots and blister plasters.",
      "Two hours for short flights and three for long-haul is safe.",
      "Shift your sleep an hour a day before leaving and get morning light.",
      "For expensive or long trips it usually pays for itself."]),
    ("gardening", ["When should I prune roses?", "Why are my seedlings leggy?",
                   "How often should I water succulents?", "What is a good ground cover for shade?"],
     ["Late winter, just as the buds start to swell.",
      "Leggy seedlings want more light; move them closer to the window.",
      "Only when the soil is fully dry, roughly every two weeks.",
      "Ferns, hostas and creeping thyme cope well with shade."]),
    ("fitness", ["How do I start strength training?", "Is it bad to stretch before running?",
                 "How many rest days do I need?", "What is a good beginner core routine?"],
     ["Begin with squats, push-ups and rows three times a week.",
      "Dynamic warm-ups are better than long static stretches before a run.",
      "One or two rest days a week is plenty for most beginners.",
      "Planks, dead bugs and glute bridges cover the basics."]),
    ("email", ["Can you make this email sound more polite?", "How do I decline a meeting nicely?",
               "What is a good subject line for a follow-up?", "How long should a cover letter be?"],
     ["Here is a softer version that thanks them first and asks rather than demands.",
      "Thank them, say you cannot attend, and offer a short written update instead.",
      "Something like: Following up on our conversation about the proposal.",
      "One page, three or four short paragraphs."]),
    ("spreadsheets", ["How do I use VLOOKUP?", "What is a pivot table for?",
                      "How do I freeze the top row?", "Can I highlight duplicates automatically?"],
     ["VLOOKUP finds a value in the first column and returns a column to its right.",
      "A pivot table summarises rows by groups, such as totals per month.",
      "Use View, then Freeze, then the top row.",
      "Conditional formatting has a rule for duplicate values."]),
    ("coffee", ["How fine should I grind for espresso?", "What is the ratio for pour-over?",
                "Why is my cold brew bitter?", "Does a burr grinder really matter?"],
     ["Fine, like table salt, and adjust by taste and shot time.",
      "About one gram of coffee to sixteen grams of water.",
      "Bitterness usually means it steeped too long or the grind was too fine.",
      "Yes, burrs give an even grind and a more consistent cup."]),
    ("photography", ["What does aperture do?", "How do I take sharper photos at night?",
                     "What is the rule of thirds?", "Should I shoot in RAW?"],
     ["Aperture sets how much light enters and how much of the scene is in focus.",
      "Use a tripod, a low ISO and a longer exposure.",
      "Place the subject on the lines that split the frame into thirds.",
      "RAW keeps more detail for editing, at the cost of bigger files."]),
    ("sleep", ["Why do I wake up at three every night?", "Is napping good or bad?",
               "How much sleep does an adult need?", "Does screen light really affect sleep?"],
     ["Stress, alcohol and a warm room are common causes of early waking.",
      "A short nap before three in the afternoon helps most people.",
      "Seven to nine hours for most adults.",
      "Bright screens late at night can delay sleepiness for some people."]),
    ("cooking", ["What can I make with chickpeas?", "How do I stop rice from sticking?",
                 "What is a quick weeknight pasta?", "How do I know when chicken is cooked?"],
     ["Hummus, a curry, or roasted chickpeas with paprika.",
      "Rinse the rice and let it rest with the lid on after cooking.",
      "Garlic, chilli, olive oil and parmesan take fifteen minutes.",
      "The juices run clear and the thickest part reaches seventy-four degrees."]),
    ("writing", ["How do I get past writer's block?", "What makes a good opening line?",
                 "Should I outline before drafting?", "How do I show rather than tell?"],
     ["Write badly on purpose for ten minutes; editing comes later.",
      "An opening that raises a question the reader wants answered.",
      "A loose outline helps, but leave room to discover the story.",
      "Describe actions and details that imply the feeling instead of naming it."]),
    ("git", ["How do I undo my last commit?", "What is the difference between merge and rebase?",
             "How do I resolve a merge conflict?", "How can I see who changed a line?"],
     ["git reset --soft HEAD~1 keeps the changes staged.",
      "Merge keeps both histories; rebase replays your commits on top.",
      "Edit the conflicted files, remove the markers, add and commit.",
      "git blame shows the last commit that touched each line."]),
    ("houseplants", ["Why are my monstera leaves yellow?", "How do I repot a plant?",
                     "Which plants survive low light?", "Should I mist my plants?"],
     ["Yellow leaves often mean overwatering; let the soil dry out.",
      "Choose a pot one size larger and loosen the roots gently.",
      "Snake plants, pothos and ZZ plants tolerate low light.",
      "Misting raises humidity only briefly; a tray of pebbles lasts longer."]),
    ("negotiation", ["How do I ask for a raise?", "What if they lowball my salary offer?",
                     "How do I negotiate rent?", "Is it rude to counter-offer?"],
     ["Bring evidence of your results and a specific number.",
      "Thank them, then counter with a researched range.",
      "Offer a longer lease in exchange for a lower monthly rate.",
      "No, a polite counter-offer is expected in most negotiations."]),
    ("astronomy", ["When is the next meteor shower?", "Can I see Saturn's rings with binoculars?",
                   "What is a light year?", "Why does the moon look bigger near the horizon?"],
     ["The Perseids peak in mid August most years.",
      "You need a small telescope; binoculars show Saturn as an oval.",
      "The distance light travels in one year, about nine trillion kilometres.",
      "It is an illusion of the brain, not a change in size."]),
    ("cycling", ["How often should I oil my chain?", "What tyre pressure should I use?",
                 "How do I fix a puncture?", "Are clipless pedals worth it?"],
     ["Every few hundred kilometres, or after riding in rain.",
      "Check the sidewall; most road tyres sit between eighty and a hundred psi.",
      "Remove the tube, find the hole, patch it and check the tyre for thorns.",
      "They help on long rides once you are used to unclipping."]),
    ("music theory", ["What is a major scale?", "How do chords get their names?",
                      "What does a time signature mean?", "What is a key change?"],
     ["A pattern of whole and half steps starting on the root note.",
      "From their root note and quality, such as C major or A minor.",
      "How many beats are in a bar and which note gets one beat.",
      "A shift of the home note partway through a piece."]),
    ("job search", ["How do I tailor my CV?", "What should I ask at the end of an interview?",
                    "How long should I wait before following up?", "How do I explain a gap in my CV?"],
     ["Mirror the language of the job advert and lead with relevant results.",
      "Ask what success looks like in the first six months.",
      "About a week after the interview is reasonable.",
      "Be brief and honest, and mention what you did during the gap."]),
    ("recycling", ["Can pizza boxes be recycled?", "What do the numbers on plastic mean?",
                   "Should I rinse containers?", "Where do old batteries go?"],
     ["Clean parts yes, greasy parts usually not.",
      "They identify the type of plastic resin.",
      "A quick rinse keeps the recycling stream clean.",
      "Most supermarkets have a battery collection box."]),
    ("meditation", ["How do I start meditating?", "What if my mind keeps wandering?",
                    "How long should a session be?", "Is there a best time of day?"],
     ["Sit comfortably and follow your breath for five minutes.",
      "Wandering is normal; gently bring attention back each time.",
      "Five to ten minutes is a good start.",
      "Morning works for many people, but consistency matters more."]),
    ("car care", ["How often should I change the oil?", "What does the check engine light mean?",
                  "How do I jump-start a car?", "When should I replace wiper blades?"],
     ["Every ten to fifteen thousand kilometres for most modern cars.",
      "It can mean anything from a loose fuel cap to a sensor fault.",
      "Connect red to red, black to a bare metal point, then start the good car first.",
      "When they streak or skip, usually once a year."]),
    ("parenting", ["How do I get a toddler to sleep?", "How much screen time is okay?",
                   "How do I handle tantrums?", "When should kids start chores?"],
     ["A calm, predictable bedtime routine helps most toddlers.",
      "Guidelines suggest about an hour a day of good programmes for young children.",
      "Stay calm, name the feeling, and wait it out safely.",
      "Small chores can start around age three."]),
    ("wine", ["What wine goes with salmon?", "How long does an open bottle keep?",
              "What does tannic mean?", "Should red wine be served warm?"],
     ["A pinot noir or a crisp white both work with salmon.",
      "Three to five days in the fridge with a stopper.",
      "Tannins give a drying feel in the mouth, common in young reds.",
      "Slightly below room temperature is best for most reds."]),
    ("language learning", ["How do I remember vocabulary?", "Is grammar or speaking more important?",
                           "How long until I am fluent?", "Are language apps enough?"],
     ["Spaced repetition flashcards and using words in sentences.",
      "Both, but speaking early builds confidence.",
      "It depends on the language and hours; often a few years of steady practice.",
      "Apps help with habit but you also need conversation."]),
    ("home office", ["What is a good desk height?", "How do I reduce back pain while working?",
                     "Is a standing desk worth it?", "How should I light my desk?"],
     ["Elbows at about ninety degrees with shoulders relaxed.",
      "Support your lower back and stand up every half hour.",
      "Alternating sitting and standing helps more than standing all day.",
      "Light from the side avoids glare on the screen."]),
    ("baking", ["Why did my cake sink?", "Can I replace butter with oil?",
                "How do I make cookies chewy?", "What does creaming butter mean?"],
     ["Opening the oven too early or too much raising agent.",
      "Yes, use about three quarters of the amount.",
      "More brown sugar and slightly underbaking keeps them chewy.",
      "Beating butter and sugar until pale and fluffy."]),
    ("chess", ["What is a good opening for beginners?", "How do I stop blundering pieces?",
               "What is castling?", "How do I get better at endgames?"],
     ["The Italian game teaches development and central control.",
      "Before each move, check what your opponent's last move attacks.",
      "A move that tucks the king away and brings a rook to the centre.",
      "Study king and pawn endings first."]),
    ("smart home", ["Which smart bulbs are easy to set up?", "Can I control the heating from my phone?",
                    "Is a smart speaker a privacy risk?", "How do I set up a routine?"],
     ["Most bulbs that pair over Bluetooth need no hub.",
      "A smart thermostat lets you schedule and adjust it remotely.",
      "It listens for a wake word; you can mute the microphone.",
      "Choose a trigger such as a time, then the actions to run."]),
]


def _filler(rng: random.Random, topic: tuple[str, list[str], list[str]]) -> list[dict[str, Any]]:
    _, asks, answers = topic
    rounds = rng.randint(2, 4)
    picks = rng.sample(range(4), min(rounds, 4))
    return [turn for i in picks for turn in ({"role": "user", "content": asks[i]},
                                             {"role": "assistant", "content": answers[i]})]


def _evidence_session(rng: random.Random, sentence: str) -> list[dict[str, Any]]:
    session = _filler(rng, rng.choice(TOPICS))
    where = rng.randrange(0, len(session) + 1, 2)  # a user position: before a user turn, or at the end
    session.insert(where, {"role": "user", "content": sentence, "has_answer": True})
    session.insert(where + 1, {"role": "assistant", "content": "Thanks for telling me, I'll keep that in mind."})
    return session


def build(seed: int = 0, *, haystack: int = 30, distractors: int = 4, pool: int = 150) -> list[dict[str, Any]]:
    """The questions, in LongMemEval's format (see the module docstring)."""
    rng = random.Random(seed)
    fillers = [_filler(rng, rng.choice(TOPICS)) for _ in range(pool)]
    evidence = [[_evidence_session(rng, s) for s in sentences] for _, _, _, sentences in FACTS]
    items = []
    start = datetime(2023, 1, 9, 9, 0)
    for index, (kind, question, answer, _) in enumerate(FACTS):
        chosen = rng.sample(range(pool), haystack)
        others = rng.sample([i for i in range(len(FACTS)) if i != index], distractors)
        sessions = [(f"f{i}", fillers[i]) for i in chosen]
        sessions += [(f"e{o}_{j}", s) for o in others for j, s in enumerate(evidence[o])]
        own = [(f"e{index}_{j}", s) for j, s in enumerate(evidence[index])]
        rng.shuffle(sessions)
        # Evidence sessions keep their order (old before new, first event before second), spread among the rest.
        slots = sorted(rng.sample(range(len(sessions) + len(own)), len(own)))
        for slot, session in zip(slots, own):
            sessions.insert(slot, session)
        moment, dates = start, []
        for _ in sessions:
            moment += timedelta(days=rng.randint(2, 8), hours=rng.randint(0, 10))
            dates.append(f"{moment:%Y/%m/%d} ({moment:%a}) {moment:%H:%M}")
        asked = moment + timedelta(days=3)
        items.append({
            "question_id": f"synthetic_{index:03d}",
            "question_type": kind,
            "question": question,
            "answer": answer,
            "question_date": f"{asked:%Y/%m/%d} ({asked:%a}) {asked:%H:%M}",
            "haystack_session_ids": [sid for sid, _ in sessions],
            "haystack_dates": dates,
            "haystack_sessions": [turns for _, turns in sessions],
            "answer_session_ids": [sid for sid, _ in own],
        })
    return items


def write(path: str | Path, seed: int = 0) -> Path:
    """Write the dataset to ``path`` (JSON); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(build(seed), indent=0))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the JSON file to write")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"wrote {write(args.out, args.seed)} ({len(FACTS)} questions)")


if __name__ == "__main__":
    main()
