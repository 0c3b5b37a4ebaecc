"""Settings → Server: the URL with "Test connection", the API key, the chat template.

"Test connection" probes the URL on a thread (:func:`halo_weave.backends.probe`) and shows
what answers there ("KoboldCPP 1.76 · no attention · text mode · 4096 ctx") or the
sentence saying why it cannot be used.  The API key is never a settings field: the
window hands it to :mod:`halo_weave.api_keys` (keyring, else session or a private file).
The template choice shows a preview of one framed exchange; for "the model's own" it is
the template the connected server's model frames with, and a line says which it is and
where it came from.
"""

from __future__ import annotations

from PySide6.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QLabel, QLineEdit, QPlainTextEdit, QPushButton, QWidget

from ..core.chat_template import AUTO, CHATML, TEMPLATES
from .control.workers import CallWorker

TEMPLATE_CHOICES = ((AUTO, "The model's own (from the server), else a built-in one"),
                    *((t.name, t.label) for t in TEMPLATES.values()))


class ServerFields:
    """Widgets added to the Server page; ``result()`` is read when the dialog is accepted."""

    def __init__(self, dialog, form, url_edit: QLineEdit, settings, api_key: str | None, keyring: bool) -> None:
        self.dialog = dialog
        self.url_edit = url_edit
        self._worker: CallWorker | None = None
        self.test_button = QPushButton("Test connection")
        self.test_button.clicked.connect(self.test_connection)
        self.result_label = QLabel("")
        self.result_label.setWordWrap(True)
        self.result_label.setObjectName("connectionResult")
        row = QWidget()
        layout = QHBoxLayout(row)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.test_button)
        layout.addWidget(self.result_label, 1)
        form.addRow("", row)

        self.key_edit = QLineEdit(api_key or "")
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.key_edit.setPlaceholderText("only for servers that ask for one")
        form.addRow("API key", self.key_edit)
        self.key_to_file = QCheckBox("Store it in a file only I can read (this machine has no system keyring)")
        self.key_to_file.setVisible(not keyring)
        form.addRow("", self.key_to_file)
        if not keyring:
            note = QLabel("No system keyring here: the key is kept for this session only unless the box is ticked.")
            note.setWordWrap(True)
            form.addRow("", note)

        self.template = QComboBox()
        for data, text in TEMPLATE_CHOICES:
            self.template.addItem(text, data)
        self.template.setCurrentIndex(max(0, self.template.findData(settings.server.chat_template)))
        dialog.editors["chat_template"] = self.template
        form.addRow("Chat template", self.template)
        self.preview = QPlainTextEdit()
        self.preview.setReadOnly(True)
        self.preview.setMaximumHeight(110)
        form.addRow("Preview", self.preview)
        #: What the choice does, under it (the dialog counts it among its explanations).
        self.template_note = QLabel("The markers around each message; saved with the conversation, "
                                    "for the turns after.")
        self.template_note.setStyleSheet("color: #8c8c91;")
        form.addRow("", self.template_note)
        self.in_use = None  # the connected server's TemplateInUse (halo_weave.backends.model_template)
        self.in_use_label = QLabel("")
        self.in_use_label.setObjectName("templateInUse")
        self.in_use_label.setWordWrap(True)
        form.addRow("In use now", self.in_use_label)
        self.template.currentIndexChanged.connect(self._show_preview)
        self._show_preview()

    def show_in_use(self, in_use) -> None:
        """The template the connected server frames with (None: not connected)."""
        self.in_use = in_use
        self.in_use_label.setText(in_use.words.removeprefix("Template: ") if in_use is not None
                                  else "not connected")
        self._show_preview()

    def _show_preview(self) -> None:
        choice = self.template.currentData() or AUTO
        if choice == AUTO and self.in_use is not None:
            template = self.in_use.template
        else:
            template = TEMPLATES.get(choice, CHATML)
        self.preview.setPlainText(template.preview())

    def test_connection(self) -> None:
        """Probe the URL in the field (on a thread) and show what answers there."""
        url, key = self.url_edit.text().strip(), self.key_edit.text().strip() or None
        api = self.dialog.editors["server_api"].currentData() or "auto"
        self.test_button.setEnabled(False)
        self.result_label.setText(f"Probing {url}…")

        def run():
            from ..backends.api_keys import get_key
            from ..backends import connect, status_line

            backend = connect(url, api_key=key or get_key(url), api=api)
            try:
                return status_line(backend, backend.model_info())
            finally:
                backend.close()

        def ok(line: str) -> None:
            self.test_button.setEnabled(True)
            self.result_label.setText(f"✓ {line}")

        def fail(exc) -> None:
            from .messages import describe

            self.test_button.setEnabled(True)
            self.result_label.setText(f"✗ {describe(exc).text}")

        worker = CallWorker(run, parent=self.dialog)
        worker.succeeded.connect(ok)
        worker.failed.connect(fail)
        self._worker = worker
        worker.start()

    def wait(self, ms: int = 30000) -> None:
        if self._worker is not None:
            self._worker.wait(ms)

    def api_key(self) -> str:
        return self.key_edit.text().strip()
