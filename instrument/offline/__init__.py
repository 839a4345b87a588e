"""What is made of a run's output after (or away from) the run, without torch: the merge of the ranks' findings
files (merge.py), the race views and their words (race_view.py, race_text.py, code_names.py, source_lines.py), the
happens-before graph of a trace, the explanation and the test oracle (hb.py), and each race's picture (graph.py,
graph_svg.py). `streamcheck report` and `streamcheck analyze` run on a machine without torch or a GPU.
"""
