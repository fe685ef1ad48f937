"""Read a `/metrics` answer the way Prometheus does (prometheus_client.parser), for the services' metric tests."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


class Scrape:
    def __init__(self, text: str) -> None:
        self.text = text
        self.samples = [(sample.name, sample.labels, sample.value)
                        for family in text_string_to_metric_families(text) for sample in family.samples]

    def value(self, name: str, **labels: str) -> float:
        """The sum of `name`'s samples whose labels include `labels`; a name or label set never exported fails."""
        found = [value for sample, sample_labels, value in self.samples
                 if sample == name and labels.items() <= sample_labels.items()]
        assert found, f"no sample {name}{labels} in:\n{self.text}"
        return sum(found)

    def label_values(self, name: str, label: str) -> set[str]:
        return {sample_labels[label] for sample, sample_labels, _ in self.samples
                if sample == name and label in sample_labels}
