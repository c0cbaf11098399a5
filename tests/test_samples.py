import io
import json
import tarfile

from ralm.samples import convert_triviaqa, sample_format, sample_path, trivia_qa_pairs


def _add(tar, name, data: bytes):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def test_convert_triviaqa_on_a_hand_made_archive(tmp_path):
    tgz = tmp_path / "tq.tgz"
    qa = {
        "Data": [
            {
                "Question": "Who wrote X?",
                "QuestionId": "q1",
                "Answer": {"Value": "Ann Lee", "Aliases": ["Ann Lee", "A. Lee"]},
            }
        ]
    }
    with tarfile.open(tgz, "w:gz") as tar:
        _add(tar, "./qa/wikipedia-dev.json", json.dumps(qa).encode())
        _add(tar, "./evidence/wikipedia/Ann_Lee.txt", b"Ann Lee wrote X.")
        _add(tar, "./evidence/web/3/3_7.txt", b"A page about X.")
        _add(tar, "./qa/.web-train.json.swp", b"\x00junk")
    assert convert_triviaqa(tgz, tmp_path / "out") == (2, 1)
    docs = [json.loads(x) for x in (tmp_path / "out" / "evidence.jsonl").read_text().splitlines()]
    assert docs == [
        {"id": "evidence/web/3/3_7.txt", "title": "3_7", "text": "A page about X."},
        {"id": "evidence/wikipedia/Ann_Lee.txt", "title": "Ann Lee", "text": "Ann Lee wrote X."},
    ]
    qas = [json.loads(x) for x in (tmp_path / "out" / "qa.jsonl").read_text().splitlines()]
    assert qas == [{"question": "Who wrote X?", "answers": ["A. Lee", "Ann Lee"], "id": "q1"}]


def test_bundled_samples_resolve():
    assert sample_path("enwiki").name.endswith(".bz2") and sample_format("enwiki") == "wiki"
    assert sample_format("lee") == "text-lines" and sample_format("triviaqa") == "jsonl"
    pairs = trivia_qa_pairs()
    assert len(pairs) == 261 and pairs[0] == (
        "Who was the 37th President of the United States?",
        ["Richard Nixon"],
    )
