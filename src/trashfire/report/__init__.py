"""The report, the pipeline's top floor: the figures (figures/, a module per family), report.html
rendered from the Jinja2 templates in templates/ (page, sections, captions), and the model
cards. It draws and renders; the numbers it shows come from the recorded tables and
trashfire.metrics."""
