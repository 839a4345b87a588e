"""`--format azure`: one Azure Pipelines logging command per finding, at the finding's place."""

from streamcheck.cli import main


def test_one_logissue_per_finding(capsys):
    assert main(["scan", "--no-cache", "--format", "azure", "/work/main/examples/hpz_race/racy.py"]) == 1
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("##vso[task.logissue type=error;sourcepath=/work/main/examples/hpz_race/racy.py;"
                           "linenumber=45;columnnumber=9;code=SC101]SC101 RAW `param.secondary_shard` is written")
