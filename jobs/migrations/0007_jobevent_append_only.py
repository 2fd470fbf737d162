"""Job events are the audit trail and the metering source (DESIGN §4, §7): a trigger refuses
UPDATE and DELETE of their rows from any client, not only through the ORM and the read-only admin.
(TRUNCATE, which only a database owner's maintenance or the test runner's flush uses, is not a
row operation and stays possible.)"""

from django.db import migrations

FORWARD = """
CREATE FUNCTION jobs_jobevent_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'jobs_jobevent is append-only (% refused)', TG_OP
        USING ERRCODE = 'restrict_violation';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER jobs_jobevent_append_only
    BEFORE UPDATE OR DELETE ON jobs_jobevent
    FOR EACH ROW EXECUTE FUNCTION jobs_jobevent_append_only();
"""

BACKWARD = """
DROP TRIGGER IF EXISTS jobs_jobevent_append_only ON jobs_jobevent;
DROP FUNCTION IF EXISTS jobs_jobevent_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [("jobs", "0006_scale_target")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
