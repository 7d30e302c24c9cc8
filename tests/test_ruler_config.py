"""config/smollm2-h200-ruler.yaml plans NVIDIA's RULER tasks, the Paul Graham needle grid and its heat maps."""

from conftest import planned_jobs, run_snakemake


def test_the_ruler_study_plans_its_data_cells_and_needle_heat_maps(workflow_copy):
    result = run_snakemake(workflow_copy, "-n", "--configfile", "config/smollm2-h200-ruler.yaml")
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = planned_jobs(result.stdout)
    # 3 tasks at 1k + 5 at 2k (qa_* at 2k only), one needle grid
    assert jobs["make_ruler"] == 8 and jobs["make_needle_grid"] == 1
    # 9 tasks x 2 question modes x (full cache + 8 presses x 3 retentions)
    assert jobs["generate"] == jobs["score"] == 9 * 2 * 25
    # one heat-map figure per press and question mode
    assert jobs["figure_needle_heatmap"] == 8 * 2
    assert "results/figures/needle/paul-graham-needle/smollm2-135m-instruct/question_aware/snapkv.png" in result.stdout
