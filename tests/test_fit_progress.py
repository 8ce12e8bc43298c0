"""The identification's progress messages (`identification.fit_progress`): one line per
evaluation under the labels the route sets, nothing when nobody listens."""

from jaxmb.identification import fit_progress


def test_evaluations_are_reported_under_nested_labels_only_while_listened_to():
    said = []
    fit_progress.evaluation(1, 2.0)  # nobody listens: nothing happens
    with fit_progress.reporting(said.append):
        fit_progress.evaluation(1, 10.0)
        with fit_progress.fitting("stage 2"), fit_progress.fitting("trying leakage fitted"):
            fit_progress.evaluation(3, 1234.5678)
        with fit_progress.fitting("long refit"):
            fit_progress.evaluation(2, 0.5)
    fit_progress.evaluation(4, 1.0)
    assert said == [
        "fitting: evaluation 1, cost 10",
        "stage 2, trying leakage fitted: evaluation 3, cost 1234.57",
        "long refit: evaluation 2, cost 0.5",
    ]
