"""The Datasets tab: built datasets, the build form and a dataset's report (controller, form, panel, words)."""
