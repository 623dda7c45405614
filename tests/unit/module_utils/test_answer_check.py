"""module_utils/answer_check.py: the degenerate-answer rule, the lenient judging of known answers, the majority
of a `known` check, and the messages a failed check gives."""
import pytest

from ansible_collections.ascend.fleet.plugins.module_utils import answer_check

COUNT_EN, COLOUR_ZH, COUNT_ZH = answer_check.QUESTIONS

DEGENERATE = [
    ("fp16 overflow", "!!!!!!!!", "one character"),
    ("the issue's four", "!!!!", "one character"),
    ("spaced marks", "! ! ! ! ! !", "one character"),
    ("vllm-ascend #5144", "你好，，，我，我，，", "one character"),
    ("a word over and over", "the the the the the", "repeated 4 times"),
    ("a Chinese word over and over", "图片图片图片图片图片", "repeated 5 times"),
    ("a loop after a good start", "There are 3 squares" + " squares" * 12, "repeated"),
    ("a sentence over and over", "The image shows a blue square. " * 4, "repeated"),
    ("marks in markdown", "**!!!!**", "one character"),
    ("nothing but markdown", "****", "only markdown"),
    ("broken bytes", "The sq\ufffd\ufffdre is red", "U+FFFD"),
    ("nothing visible", " \n\t ", "empty"),
    ("only marks", "?!.,", "punctuation"),
    ("mostly marks", "a，。！？b、", "punctuation"),
]
HEALTHY = ["3", "红", "红色", "OK!", "?!.", "**3**", "**红色**", "(3)", "`3`", "「红」", "3.", "哈哈哈",
           "There are 3 squares.", "图中有5个方块。", "方块是红色的。",
           "这张图片展示了一个户外场景，画面中央有一条小路，两侧是绿色的树木和草地，远处可以看到蓝天和几朵白云。",
           "The picture shows three blue squares on a white background, two at the top and one below them."]


@pytest.mark.parametrize("name,text,why", DEGENERATE, ids=[case[0] for case in DEGENERATE])
def test_degenerate_answers_are_named_with_their_rule(name, text, why):
    assert why in (answer_check.degenerate(text) or ""), (name, answer_check.degenerate(text))


@pytest.mark.parametrize("text", HEALTHY)
def test_healthy_answers_short_or_long_are_not_degenerate(text):
    assert answer_check.degenerate(text) is None


def test_every_rule_is_documented_for_the_report():
    names = [rule.split(":")[0] for rule in answer_check.DEGENERATE_RULES]
    assert names == ["empty", "replacement characters", "one character", "repetition", "punctuation"]
    # Each rule's text names the thresholds the code applies.
    assert "at least 4" in answer_check.DEGENERATE_RULES[2] and "21 to 64" in answer_check.DEGENERATE_RULES[3]
    assert answer_check.SHORTEST_COUNTED == 4


RIGHT = [
    (COUNT_EN, "3"), (COUNT_EN, "There are 3 squares."), (COUNT_EN, "Three."), (COUNT_EN, "３"),
    (COUNT_EN, "THERE ARE THREE SQUARES"), (COUNT_EN, "图中有三个方块"), (COUNT_EN, "一共有3个方块。"),
    (COUNT_EN, "**3**"), (COUNT_EN, "There are three (3) squares."), (COUNT_EN, "三"), (COUNT_EN, "3️⃣"),
    (COUNT_EN, "There are 3 squares: 2 in the top row and 1 in the bottom row."),
    (COUNT_EN, "There are 3 squares in this 448x448 picture."), (COUNT_EN, "There are three squares, each one blue."),
    (COUNT_ZH, "5"), (COUNT_ZH, "五个"), (COUNT_ZH, "图中有5个方块。"), (COUNT_ZH, "five"),
    (COUNT_ZH, "一张图片里有五个方块"), (COUNT_ZH, "图中有5个绿色方块，第一行3个，第二行2个。"),
    (COLOUR_ZH, "红色"), (COLOUR_ZH, "紅色"), (COLOUR_ZH, "Red."), (COLOUR_ZH, "The square is red."),
    (COLOUR_ZH, "方块是红色的，背景是白色。"),
]
WRONG = [
    (COUNT_EN, "There are 5 squares.", "the first number it names is 5"),
    (COUNT_EN, "four", "the first number it names is 4"),
    (COUNT_EN, "图中有五个方块", "the first number it names is 5"),
    (COUNT_ZH, "30", "the first number it names is 30"), (COUNT_ZH, "十五个", "the first number it names is 15"),
    (COUNT_ZH, "二十五个方块", "the first number it names is 25"),
    (COUNT_EN, "A picture of squares.", "it names no number"), (COUNT_EN, "The squares are blue.", "no number"),
    (COLOUR_ZH, "蓝色", "it names blue"), (COLOUR_ZH, "red and green", "it names green"),
    (COLOUR_ZH, "orange", "does not name red"), (COLOUR_ZH, "shredded", "does not name red"),
]


@pytest.mark.parametrize("question,answer", RIGHT)
def test_known_answers_are_judged_leniently(question, answer):
    assert answer_check.judge(question, answer, "known") == ("right", None)


@pytest.mark.parametrize("question,answer,why", WRONG)
def test_wrong_answers_fail_known_and_pass_sane(question, answer, why):
    verdict, reason = answer_check.judge(question, answer, "known")
    assert verdict == "wrong" and why in reason, (verdict, reason)
    assert answer_check.judge(question, answer, "sane") == ("right", None)


def test_every_question_has_a_picture_of_what_it_expects():
    for question in answer_check.QUESTIONS:
        png = question.png()
        assert png.startswith(b"\x89PNG\r\n\x1a\n")
        count = question.expected if question.kind == "count" else 1
        assert len(question.squares) == count and question.picture().startswith("%d " % count)
        if question.kind == "colour":
            assert question.colour == question.expected


def scripted(*answers):
    """ask() answering each question in turn with the next of answers (an exception is raised), and the
    questions it was asked."""
    asked = []

    def ask(question):
        asked.append(question.name)
        answer = answers[len(asked) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer

    return ask, asked


def test_known_passes_on_two_right_answers_without_asking_the_third():
    ask, asked = scripted("3", "红色")
    verdict = answer_check.check_answers(ask, "known")
    assert verdict["passed"] and verdict["failure"] is None and asked == ["count-en", "colour-zh"]


def test_one_unlucky_answer_does_not_fail_known():
    ask, asked = scripted("4", "红色", "5")
    verdict = answer_check.check_answers(ask, "known")
    assert verdict["passed"] and len(asked) == 3
    assert [entry["verdict"] for entry in verdict["asked"]] == ["wrong", "right", "right"]


def test_two_wrong_answers_fail_known_quoting_each_question_expectation_and_answer():
    ask, asked = scripted("There are 5 squares.", "The square is blue.")
    verdict = answer_check.check_answers(ask, "known")
    assert not verdict["passed"] and len(asked) == 2
    message = verdict["failure"]
    for piece in ('"How many squares are in this picture? Answer with a number."', "3 blue squares",
                  "expected 3 (or three)", '"There are 5 squares."', "the first number it names is 5",
                  '"图中方块是什么颜色？请用一个词回答。"', "expected red (红)", '"The square is blue."',
                  "it names blue", "Fix:", "float16"):
        assert piece in message, (piece, message)


def test_a_degenerate_answer_fails_at_once():
    ask, asked = scripted("!" * 32)
    verdict = answer_check.check_answers(ask, "known")
    assert not verdict["passed"] and asked == ["count-en"]
    assert '"' + "!" * 32 + '"' in verdict["failure"] and "degenerate" in verdict["failure"]


def test_a_long_hostile_answer_is_judged_in_bounded_time_and_words():
    """An answer of a megabyte (a server that never stops) is read only as far as READ_CHARS."""
    for text in ("3" + "ﷺ" * 1000000, "x" * 1000000, "ab" * 500000):
        for mode in ("known", "sane"):
            verdict = answer_check.check_answers(lambda question, text=text: text, mode)
            assert len(verdict["failure"] or "") < 2000


def test_no_answer_counts_as_a_failed_question_with_what_came_back():
    ask, asked = scripted(answer_check.AnswerError("the server answered HTTP 500: boom"), "红色", "5")
    verdict = answer_check.check_answers(ask, "known")
    assert verdict["passed"] and verdict["asked"][0]["verdict"] == "no answer"
    ask, asked = scripted(answer_check.AnswerError("the server answered nothing: refused"),
                          answer_check.AnswerError("the server answered nothing: refused"))
    verdict = answer_check.check_answers(ask, "known")
    assert not verdict["passed"] and "got no answer (the server answered nothing: refused)" in verdict["failure"]


def test_sane_asks_once_and_takes_any_words():
    ask, asked = scripted("I see a painting of a cat.")
    assert answer_check.check_answers(ask, "sane")["passed"] and len(asked) == 1
    ask, asked = scripted("你好，，，我，我，，")
    verdict = answer_check.check_answers(ask, "sane")
    assert not verdict["passed"] and "an answer that is not degenerate" in verdict["failure"]


def test_none_asks_nothing():
    ask, asked = scripted()
    assert answer_check.check_answers(ask, "none") == {"mode": "none", "passed": True, "asked": [], "failure": None}


def test_a_huge_answer_is_quoted_in_an_excerpt():
    ask, _asked = scripted("x" + "ab" * 50000)
    verdict = answer_check.check_answers(ask, "sane")
    assert not verdict["passed"] and len(verdict["failure"]) < 1500
    assert len(verdict["asked"][0]["answer"]) == answer_check.READ_CHARS
