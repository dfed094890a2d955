"""The Streamlit dashboard: the script (``streamlit_app.py``), its pages (``app_pages/``),
charts, theme, filters, the page kit and the data source; :mod:`.ui` serves it.
"""

__all__: list[str] = []
