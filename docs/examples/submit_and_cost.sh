#!/bin/sh
# Submit a job with curl, poll it until it ends, then read the project's cost this month.
#
#   GPUPOOL_URL=http://127.0.0.1:8000 GPUPOOL_USERNAME=ai-admin GPUPOOL_PASSWORD=gpupool-demo \
#       sh docs/examples/submit_and_cost.sh
#
# Needs curl and python3 (only to read JSON; jq works as well). Environment as in
# submit_and_cost.py: GPUPOOL_URL, GPUPOOL_TOKEN or GPUPOOL_USERNAME/GPUPOOL_PASSWORD,
# GPUPOOL_PROJECT (default nlp-llm), GPUPOOL_FLAVOR (default A100-80G), GPUPOOL_WAIT (600 s),
# GPUPOOL_POLL (5 s), GPUPOOL_SIM_DURATION (simulated run time, 600 s).
set -eu

URL=${GPUPOOL_URL:-http://127.0.0.1:8000}
PROJECT=${GPUPOOL_PROJECT:-nlp-llm}
FLAVOR=${GPUPOOL_FLAVOR:-A100-80G}
WAIT=${GPUPOOL_WAIT:-600}
POLL=${GPUPOOL_POLL:-5}
SIM_DURATION=${GPUPOOL_SIM_DURATION:-600}
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

# 1. A token (or use the one in GPUPOOL_TOKEN).
if [ -z "${GPUPOOL_TOKEN:-}" ]; then
  GPUPOOL_TOKEN=$(curl -sf -X POST "$URL/api/v1/auth/token/" -H 'Content-Type: application/json' \
    -d "{\"username\": \"$GPUPOOL_USERNAME\", \"password\": \"$GPUPOOL_PASSWORD\", \"expires_in_days\": 1}" \
    | json 'd["token"]')
fi
AUTH="Authorization: Token $GPUPOOL_TOKEN"

# 2. The project's id and department (the API takes ids; codes are for people).
PROJECT_JSON=$(curl -sf -H "$AUTH" "$URL/api/v1/projects/?code=$PROJECT")
PROJECT_ID=$(echo "$PROJECT_JSON" | json 'd["results"][0]["id"]')
DEPARTMENT_ID=$(echo "$PROJECT_JSON" | json 'd["results"][0]["department"]')

# 3. Submit. A refusal is a 400 with the field named; -f makes curl fail on it.
JOB_ID=$(curl -sf -X POST "$URL/api/v1/jobs/" -H "$AUTH" -H 'Content-Type: application/json' -d "{
  \"name\": \"example-curl\", \"project\": $PROJECT_ID, \"kind\": \"training\",
  \"flavor\": \"$FLAVOR\", \"workers\": 1, \"gpus_per_worker\": 1, \"priority\": \"training\",
  \"image\": \"registry.example.com/llm/finetune:1.0\", \"command\": \"python train.py\",
  \"max_runtime_seconds\": 3600, \"sim_duration_seconds\": $SIM_DURATION}" | json 'd["id"]')
echo "submitted job $JOB_ID" >&2

# 4. Poll until the job ends (or WAIT seconds pass); while queued, ask why it waits.
STATE=queued
END=$(( $(date +%s) + WAIT ))
while [ "$(date +%s)" -lt "$END" ]; do
  STATE=$(curl -sf -H "$AUTH" "$URL/api/v1/jobs/$JOB_ID/" | json 'd["state"]')
  case $STATE in succeeded|failed|cancelled|rejected|expired) break ;; esac
  if [ "$STATE" = queued ]; then
    curl -sf -H "$AUTH" "$URL/api/v1/jobs/$JOB_ID/explain/" | json '"queued, position %s: %s" % (d["position"], d["reason"])' >&2
  else
    echo "$STATE" >&2
  fi
  sleep "$POLL"
done
echo "job $JOB_ID: $STATE"

# 5. The cost: this month's estimate for the project's department (finance and admins; 404 for
#    members). Card-hours and money of the project's lines, as metered so far.
CODE=$(curl -s -o /tmp/gpupool-estimate.$$ -w '%{http_code}' -H "$AUTH" \
  "$URL/api/v1/statements/estimate/?department=$DEPARTMENT_ID")
if [ "$CODE" = 200 ]; then
  json "'metered through %s: %.6f card-hours, %.2f' % (d[0]['metered_through'] if d else None, sum(float(l['card_hours']) for e in d for l in e['lines'] if l['project'] == $PROJECT_ID), sum(float(l['amount'] or 0) for e in d for l in e['lines'] if l['project'] == $PROJECT_ID))" < /tmp/gpupool-estimate.$$
else
  echo "no cost visible to this user (HTTP $CODE): ask finance or a department admin"
fi
rm -f /tmp/gpupool-estimate.$$
