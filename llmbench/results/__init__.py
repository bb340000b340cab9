"""The result files' own types and formats, below everything that writes or reads them: a request's row
(records.py: requests.jsonl), a run's summary (summary.py: summary.json, with its metrics.py and
steps.py parts), the checks and format every JSON result file shares (json_file.py), and the atomic
write and steps.csv read back (files.py)."""
