"""Creates what the aws-batch tests expect in a fresh moto server, unless it exists already:
the IAM service role, an UNMANAGED compute environment and the job queue `codalab-batch-cpu`.
Also puts moto's Batch job runner in its normal mode (docker engine, one status per step).

Usage: python seed.py ENDPOINT_URL
"""

import json
import sys
import urllib.request

import boto3

ACCOUNT = "123456789012"
ROLE = "codalab-wm-batch-service"
COMPUTE_ENVIRONMENT = "codalab-wm-test"
QUEUES = ["codalab-batch-cpu", "codalab-batch-spot"]
TRUST = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": {"Service": "batch.amazonaws.com"}, "Action": "sts:AssumeRole"}],
}


def moto_api(endpoint, path, payload):
    request = urllib.request.Request(
        endpoint + path, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


def main():
    endpoint = sys.argv[1]
    session = boto3.Session(aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1")
    iam = session.client("iam", endpoint_url=endpoint)
    batch = session.client("batch", endpoint_url=endpoint)

    moto_api(endpoint, "/moto-api/config", {"batch": {"use_docker": True}})
    moto_api(endpoint, "/moto-api/state-manager/unset-transition", {"model_name": "batch::job"})

    roles = [r["RoleName"] for r in iam.list_roles()["Roles"]]
    if ROLE not in roles:
        iam.create_role(RoleName=ROLE, AssumeRolePolicyDocument=json.dumps(TRUST))
        print("created role", ROLE)
    role_arn = "arn:aws:iam::%s:role/%s" % (ACCOUNT, ROLE)

    environments = batch.describe_compute_environments(computeEnvironments=[COMPUTE_ENVIRONMENT])
    if not environments["computeEnvironments"]:
        batch.create_compute_environment(
            computeEnvironmentName=COMPUTE_ENVIRONMENT, type="UNMANAGED", state="ENABLED", serviceRole=role_arn
        )
        print("created compute environment", COMPUTE_ENVIRONMENT)

    existing = {q["jobQueueName"] for q in batch.describe_job_queues(jobQueues=QUEUES)["jobQueues"]}
    for queue in QUEUES:
        if queue not in existing:
            batch.create_job_queue(
                jobQueueName=queue,
                state="ENABLED",
                priority=1,
                computeEnvironmentOrder=[{"order": 1, "computeEnvironment": COMPUTE_ENVIRONMENT}],
            )
            print("created job queue", queue)


if __name__ == "__main__":
    main()
