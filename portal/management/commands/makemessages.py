"""``makemessages`` that also extracts ``pgettext_noop(context, msgid)`` (portal/texts.py): texts
stored as messages and translated when read, such as job event reasons."""

from django.core.management.commands import makemessages


class Command(makemessages.Command):
    xgettext_options = [*makemessages.Command.xgettext_options, "--keyword=pgettext_noop:1c,2"]
