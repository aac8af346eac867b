"""Content words of a text, for ranking evidence sentences and windows by
how many words they share with a claim (train.py cuts long evidence with
it; score_wice.py picks the windows it scores). Standard library only."""
import re

STOP = set("""a an the of to in on at by for with from and or but is are was were be been being
it its this that these those as into than then there their they he she his her him we our you your
i not no do does did has have had will would can could may might shall should which who whom whose
what when where why how all any some such also more most other""".split())


def words(s):
    return [w for w in re.findall(r"[a-z0-9]+", s.lower()) if w not in STOP]
