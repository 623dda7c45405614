# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a served model answers right, and whether what it answers is text at all.

A server that answers HTTP 200 can still be useless: on 310P, float16 is the only dtype the chip runs, and an
fp16 overflow makes vLLM-Ascend answer ``!!!!!!!!`` or degenerate text such as ``你好，，，我，我，，``
(vllm-ascend issues #562, #5144, #6533); a wrong chat template, another model's weights or a broken image
processor answer 200 too. The probe (deploy and verify) and the load test (before and after its matrix) ask the
same questions and judge them by the rules here, so the two cannot disagree.

Known questions. Each comes with a picture drawn on the host (module_utils/png_images.py, standard library)
that has one right answer a vision model must read from it: how many squares there are, or their colour. An
answer is judged leniently: English or Chinese, any case and punctuation, numbers in digits (full width too),
English words or Chinese numerals, markdown marks around it. A count is right when the first number the
answer names is the expected one (what follows, such as "2 in the top row", is explanation); a colour is right
when the expected colour is named and no other colour of the palette is.

Checks (the ``answer_check`` option of the modules that ask them):
- ``known``: the known questions are asked in turn until two are answered right (passed) or two wrong
  (failed), so one unlucky answer does not fail a host; a degenerate answer fails at once.
- ``sane``: one known question is asked, and any answer that is not degenerate passes.
- ``none``: nothing is asked.

The smoke request (smoke) comes before them in the probe and the verification (fleet_verify): a generated image and
the seed's prompt, the request an operator sends by hand, whose answer must be text with a usage block;
check_answers_of then judges that answer (unless the check is none) and asks the questions.

Degenerate answers (DEGENERATE_RULES, in the order they are tried) are what no healthy model says, however
short its answer: see the tuple below, which the benchmark report prints beside its metric definitions.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import json
import re
import time
import unicodedata

from ansible_collections.ascend.fleet.plugins.module_utils.openai_client import ImageChat, answer_text, image_data_url
from ansible_collections.ascend.fleet.plugins.module_utils.png_images import png_image, shapes_png

CHECKS = ("known", "sane", "none")
# The smoke request's text, sent with a generated image: the request an operator sends by hand (the seed's prompt).
SMOKE_PROMPT = "请描述一下图片"
SERVER_LOG_FIX = "Fix: read the server's log (docker logs of its container) for what it did with the request"
# Answers to "how many" and "what colour" are a few tokens; a model that talks on is cut here, not waited for.
ANSWER_MAX_TOKENS = 32
# Right or wrong answers that end a `known` check.
DECIDING_ANSWERS = 2
# How much of an answer a message quotes, and how much of it the rules read.
QUOTE_CHARS = 120
READ_CHARS = 4000

DEGENERATE_RULES = (
    "empty: no visible character, or only markdown and bracket marks",
    "replacement characters: it holds U+FFFD, the mark of bytes that are no UTF-8 text",
    "one character: a single character makes up more than half of its visible characters, when there are at "
    "least 4 (markdown and bracket marks such as * ` ( ) 「 」 not counted)",
    "repetition: a unit of 1 to 20 characters repeated back to back at least 4 times, or of 21 to 64 characters "
    "at least 3 times, covers half of it or more",
    "punctuation: punctuation and symbols make up more than half of its visible characters, when there are at "
    "least 4 (markdown and bracket marks not counted)",
)
REPEATED_UNIT = re.compile(r"(.{1,20}?)\1{3,}|(.{21,64}?)\2{2,}", re.S)
# Marks a healthy model writes around a short answer (**3**, `3`, (3), 「红」): neither text nor noise. The curly
# quotes are escaped: Ansible's sanity suite takes them in code for mistyped ASCII quotes.
FORMATTING_MARKS = frozenset("*_`#~()[]{}<>\"'\u201c\u201d\u2018\u2019「」『』（）【】《》〈〉")
SHORTEST_COUNTED = 4

PICTURE_SIDE = 448
COLOURS = {
    # name: (RGB painted, words that name it: English, simplified and traditional Chinese)
    "red": ((220, 30, 30), ("red", "红", "紅")),
    "green": ((30, 160, 60), ("green", "绿", "綠")),
    "blue": ((30, 80, 220), ("blue", "蓝", "藍")),
    "yellow": ((235, 200, 20), ("yellow", "黄", "黃")),
}
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                "twelve")
CHINESE_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "兩": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7,
                  "八": 8, "九": 9}
# A Chinese numeral counts as a number before the measure words of squares (三个, 十五個, 两块) or as the whole
# answer (三): 一 also begins everyday words (一共, 一张图片).
MEASURE_WORDS = "个個块塊"
NUMBER = re.compile(r"(\d+)|\b(%s)\b|([%s十]+)(?=[%s])|^\W*([%s十]+)\W*$" % (
    "|".join(NUMBER_WORDS), "".join(CHINESE_DIGITS), MEASURE_WORDS, "".join(CHINESE_DIGITS)))


class KnownQuestion(collections.namedtuple("KnownQuestion", "name prompt kind expected colour squares")):
    """A question with one right answer about a picture of squares: kind is count (expected: how many) or
    colour (expected: the colour's name); squares are (left, top, side) in a PICTURE_SIDE square picture."""

    def png(self):
        return shapes_png(PICTURE_SIDE, PICTURE_SIDE, self.squares, COLOURS[self.colour][0])

    def expected_text(self):
        if self.kind == "count":
            return "%d (or %s)" % (self.expected, NUMBER_WORDS[self.expected])
        return "%s (%s)" % (self.expected, COLOURS[self.expected][1][1])

    def picture(self):
        count = len(self.squares)
        return "%d %s square%s" % (count, self.colour, "" if count == 1 else "s")


QUESTIONS = (
    KnownQuestion("count-en", "How many squares are in this picture? Answer with a number.", "count", 3, "blue",
                  ((48, 64, 96), (176, 256, 96), (304, 64, 96))),
    KnownQuestion("colour-zh", "图中方块是什么颜色？请用一个词回答。", "colour", "red", "red", ((112, 112, 224),)),
    KnownQuestion("count-zh", "图中有几个方块？请只回答数字。", "count", 5, "green",
                  ((40, 40, 80), (184, 40, 80), (328, 40, 80), (112, 248, 80), (256, 248, 80))),
)
# Why an answer fails a check, in its own words.
ANSWER_FIX = (
    "Fix: on 310P, answers like these most often mean float16 overflow in the model: run it with --dtype float16 "
    "and the model revision the image is known to work with, and check the image's precision settings; "
    "otherwise check the chat template and that the model folder holds the served model's own weights (README, "
    "troubleshooting: the answers are wrong or garbage)")


class AnswerError(RuntimeError):
    """A question got no answer to judge (an HTTP error, no text); the message says what came back."""


def quote(text):
    """An answer as a message shows it: in JSON quotes (control characters visible), cut at QUOTE_CHARS."""
    return json.dumps(text if len(text) <= QUOTE_CHARS else text[:QUOTE_CHARS] + "...", ensure_ascii=False)


def degenerate(text):
    """Why an answer is no text a healthy model gives (DEGENERATE_RULES), or None."""
    text = text[:READ_CHARS]
    counted = [character for character in text if not character.isspace() and character not in FORMATTING_MARKS]
    if not counted:
        return "it is empty" if not text.strip() else "it holds only markdown or bracket marks"
    if "\ufffd" in text:
        return "it holds U+FFFD replacement characters (bytes that are no UTF-8 text)"
    character, count = collections.Counter(counted).most_common(1)[0]
    if len(counted) >= SHORTEST_COUNTED and count * 2 > len(counted):
        return "one character, %s, makes up %d of its %d characters" % (quote(character), count, len(counted))
    stripped = text.strip()
    for match in REPEATED_UNIT.finditer(stripped):
        unit = match.group(1) or match.group(2)
        if len(match.group(0)) * 2 >= len(stripped):
            return "%s is repeated %d times back to back" % (quote(unit), len(match.group(0)) // len(unit))
    marks = sum(1 for character in counted if unicodedata.category(character)[0] in "PS")
    if len(counted) >= SHORTEST_COUNTED and marks * 2 > len(counted):
        return "%d of its %d characters are punctuation or symbols" % (marks, len(counted))
    return None


def chinese_number(numeral):
    """The value of a Chinese numeral below 100 (三, 十五, 二十, 二十五), or None."""
    if "十" not in numeral:
        return CHINESE_DIGITS[numeral] if len(numeral) == 1 else None
    tens, _ten, ones = numeral.partition("十")
    if len(tens) > 1 or len(ones) > 1 or "十" in ones:
        return None
    return CHINESE_DIGITS.get(tens, 1) * 10 + (CHINESE_DIGITS[ones] if ones else 0)


def first_number(text):
    """The first number an NFKC-lowered answer names, in digits, English words or Chinese numerals; None."""
    for match in NUMBER.finditer(text):
        digits, word, chinese = match.group(1), match.group(2), match.group(3) or match.group(4)
        if digits:
            return int(digits[:6])
        if word:
            return NUMBER_WORDS.index(word)
        value = chinese_number(chinese)
        if value is not None:
            return value
    return None


def wrong_because(question, answer):
    """Why a (not degenerate) answer to a known question is wrong, or None when it is right."""
    text = unicodedata.normalize("NFKC", answer[:READ_CHARS]).lower()
    if question.kind == "count":
        named = first_number(text)
        if named is None:
            return "it names no number"
        if named != question.expected:
            return "the first number it names is %d" % named
        return None
    named = [name for name, (_rgb, names) in sorted(COLOURS.items())
             if any(re.search(r"\b%s\b" % word if word.isascii() else word, text) for word in names)]
    others = [name for name in named if name != question.expected]
    if others:
        return "it names %s" % ", ".join(others)
    if question.expected not in named:
        return "it does not name %s" % question.expected
    return None


def judge(question, answer, mode):
    """(verdict, why) of one answer: right, wrong or degenerate; under `sane` any answer that is not degenerate
    is right."""
    why = degenerate(answer)
    if why:
        return "degenerate", why
    why = wrong_because(question, answer) if mode == "known" else None
    return ("wrong", why) if why else ("right", None)


def asker(client, model, timeout, deadline=None):
    """ask(question): the text a server (an openai_client.Client) answers to a known question, greedy (temperature
    0, so a healthy model gives its best answer every time); AnswerError when it gives no text. timeout bounds each
    answer; deadline (module_utils/deadline.py), the module's, all of them: each gets at most what is left of it, and
    one it cuts is DeadlinePassed, not a question left unanswered."""

    def ask(question):
        body = ImageChat(model, question.prompt, ANSWER_MAX_TOKENS, temperature=0).body(
            image_data_url(question.png()))
        waiting_on = "the answer to the answer check's question %s" % question.name
        status, reply = client.chat(body, timeout=timeout if deadline is None else deadline.allow(waiting_on, timeout))
        if status is None and deadline is not None:
            deadline.check(waiting_on)
        if status != 200:
            raise AnswerError("the server answered %s: %s" % (
                "HTTP %d" % status if status is not None else "nothing", quote(str(reply))))
        text = answer_text(reply) if isinstance(reply, dict) else None
        if text is None:
            raise AnswerError("the answer holds no choices[0].message.content text: %s" % quote(str(reply)))
        return text

    return ask


def check_answers(ask, mode):
    """The verdict on a server's answers under mode (CHECKS), asking with ask (see asker): a dict with mode,
    passed, asked (per question asked: question, prompt, picture, expected, answer, verdict, why) and failure
    (None, or a message quoting each question that failed, what was expected and what came back)."""
    result = {"mode": mode, "passed": True, "asked": [], "failure": None}
    if mode == "none":
        return result
    right = wrong = 0
    for question in QUESTIONS[:1] if mode == "sane" else QUESTIONS:
        entry = {"question": question.name, "prompt": question.prompt, "picture": question.picture(),
                 "expected": question.expected_text() if mode == "known" else "an answer that is not degenerate"}
        try:
            answer = ask(question)
        except AnswerError as error:
            entry.update(answer=None, verdict="no answer", why=str(error))
        else:
            verdict, why = judge(question, answer, mode)
            entry.update(answer=answer[:READ_CHARS], verdict=verdict, why=why)
        result["asked"].append(entry)
        if entry["verdict"] == "right":
            right += 1
        else:
            wrong += 1
        if entry["verdict"] == "degenerate" or wrong >= DECIDING_ANSWERS or right >= DECIDING_ANSWERS \
                or mode == "sane":
            break
    failed = [entry for entry in result["asked"] if entry["verdict"] != "right"]
    if right < DECIDING_ANSWERS and (mode == "known" or failed):
        result["passed"] = False
        result["failure"] = "the answer check (%s) failed: %s. %s" % (mode, "; ".join(
            describe(entry) for entry in failed), ANSWER_FIX)
    return result


def describe(entry):
    """One failed question of a check, as its message words it."""
    asked = "asked %s about a picture of %s, expected %s" % (
        quote(entry["prompt"]), entry["picture"], entry["expected"])
    if entry["answer"] is None:
        return "%s, got no answer (%s)" % (asked, entry["why"])
    return "%s, got %s (%s: %s)" % (asked, quote(entry["answer"]), entry["verdict"], entry["why"])


def smoke(client, params, size, deadline):
    """The smoke request's answer ({answer, usage, smoke_latency_s}): params' model, prompt and max_tokens with a
    generated image of size (width, height), answered within request_timeout and the deadline; RuntimeError naming
    what came back when it is no chat completion with text and a usage block."""
    body = ImageChat(params["model"], params["prompt"], params["max_tokens"]).body(image_data_url(png_image(*size)))
    started = time.time()
    waiting_on = "the image request's answer"
    status, reply = client.chat(body, timeout=deadline.allow(waiting_on, params["request_timeout"]))
    elapsed = time.time() - started
    if status is None:
        deadline.check(waiting_on)
        raise RuntimeError("the image request got no answer: %s. %s" % (reply, SERVER_LOG_FIX))
    if status != 200:
        raise RuntimeError("the image request answered HTTP %d: %s. %s" % (status, str(reply)[:500], SERVER_LOG_FIX))
    if not isinstance(reply, dict):
        raise RuntimeError("the image request answered 200 with %r, not a chat completion. Fix: check that base_url "
                           "is the vLLM server itself, not a proxy or another service" % str(reply)[:500])
    answer = answer_text(reply)
    if answer is None:
        raise RuntimeError("the image request's answer has no choices[0].message.content text: %s. Fix: check that "
                           "base_url is vLLM's OpenAI-compatible server" % json.dumps(reply)[:500])
    if not answer.strip():
        raise RuntimeError("the image request got an empty answer: %s. %s" % (json.dumps(reply)[:500], SERVER_LOG_FIX))
    if not isinstance(reply.get("usage"), dict):
        raise RuntimeError("the image request's answer has no usage block: %s. Fix: check that base_url is vLLM's "
                           "OpenAI-compatible server" % json.dumps(reply)[:500])
    return {"answer": answer.strip()[:200], "usage": reply["usage"], "smoke_latency_s": round(elapsed, 3)}


def check_answers_of(client, params, smoke_answer, deadline):
    """The answer check's verdict under params' answer_check, the smoke answer judged first (unless none);
    RuntimeError quoting what failed."""
    if params["answer_check"] != "none":
        why = degenerate(smoke_answer)
        if why:
            raise RuntimeError("the image request's answer %s is degenerate (%s). %s"
                               % (quote(smoke_answer), why, ANSWER_FIX))
    verdict = check_answers(asker(client, params["model"], params["request_timeout"], deadline),
                            params["answer_check"])
    if not verdict["passed"]:
        raise RuntimeError(verdict["failure"])
    return verdict
