"""The result files' own types and formats, below everything that writes or reads them: a request's row
(records.py: requests.jsonl) and the file handling every result file shares (files.py: the atomic
write, steps.csv read back)."""
