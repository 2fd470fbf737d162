"""The approval audit trail is append-only in the database too: a trigger refuses UPDATE and
DELETE of its rows from any client, not only through the ORM (DESIGN §6)."""

from django.db import migrations

FORWARD = """
CREATE FUNCTION portal_approvalaudit_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'portal_approvalaudit is append-only (% refused)', TG_OP
        USING ERRCODE = 'restrict_violation';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER portal_approvalaudit_append_only
    BEFORE UPDATE OR DELETE ON portal_approvalaudit
    FOR EACH ROW EXECUTE FUNCTION portal_approvalaudit_append_only();
"""

BACKWARD = """
DROP TRIGGER IF EXISTS portal_approvalaudit_append_only ON portal_approvalaudit;
DROP FUNCTION IF EXISTS portal_approvalaudit_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [("portal", "0002_approvals")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
