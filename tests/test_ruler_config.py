"""config/smollm2-h200-ruler.yaml plans NVIDIA's RULER tasks, the Paul Graham needle grid and its heat maps."""

from conftest import planned_jobs, run_snakemake


def test_the_ruler_study_plans_its_data_cells_and_needle_heat_maps(workflow_copy):
    result = run_snakemake(workflow_copy, "-n", "--configfile", "config/smollm2-h200-ruler.yaml")
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = planned_jobs(result.stdout)
    # 3 tasks at 1k + 4 at 2k (qa_1 at 2k only; qa_2 left out: RULER's qa.py stalled making it), one needle grid
    assert jobs["make_ruler"] == 7 and jobs["make_needle_grid"] == 1
    # 8 tasks x 2 question modes x (full cache + 8 presses x 3 retentions)
    assert jobs["generate"] == jobs["score"] == 8 * 2 * 25
    # one heat-map figure per press and question mode
    assert jobs["figure_needle_heatmap"] == 8 * 2
    assert "results/figures/needle/paul-graham-needle/smollm2-135m-instruct/question_aware/snapkv.png" in result.stdout
