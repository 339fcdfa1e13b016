//! The fake itself, over real HTTP on 127.0.0.1: the discovery document's checks reject
//! malformed requests (naming the field or parameter), the answers conform to the document's
//! response schemas, and instances and operations move as documented. (No Compute Engine
//! emulator exists; this fake is what the `gce` backend is tested against.)

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use codalab_wm_fake_gce::discovery::Discovery;
use codalab_wm_fake_gce::{FakeCompute, Fault, TEST_KEY_PEM, TEST_SERVICE_ACCOUNT, pem_to_der};
use serde_json::{Value, json};

const PROJECT: &str = "test-project";
const ZONE: &str = "us-central1-a";

struct Client {
    http: reqwest::Client,
    api: String,
    token: String,
}

impl Client {
    async fn new(fake: &FakeCompute) -> Self {
        let http = reqwest::Client::new();
        let answer: Value = http
            .get(format!(
                "{}/computeMetadata/v1/instance/service-accounts/default/token",
                fake.url()
            ))
            .header("Metadata-Flavor", "Google")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let token = answer["access_token"].as_str().unwrap().to_owned();
        Self {
            http,
            api: fake.api_url(),
            token,
        }
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.api))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }
}

fn instance(name: &str) -> Value {
    json!({
        "name": name,
        "machineType": format!("zones/{ZONE}/machineTypes/e2-standard-4"),
        "labels": {"codalab-wm-manager": "m1", "codalab-wm-pool": "default"},
        "disks": [{"boot": true, "autoDelete": true, "initializeParams": {
            "sourceImage": "projects/cos-cloud/global/images/family/cos-stable",
            "diskSizeGb": "50"}}],
        "networkInterfaces": [{"network": "global/networks/default"}],
        "scheduling": {"provisioningModel": "SPOT", "instanceTerminationAction": "DELETE"},
    })
}

fn insert_path() -> String {
    format!("projects/{PROJECT}/zones/{ZONE}/instances")
}

async fn fake() -> FakeCompute {
    FakeCompute::start(PROJECT).await.unwrap()
}

#[tokio::test]
async fn malformed_requests_are_rejected_naming_the_field() {
    let fake = fake().await;
    let client = Client::new(&fake).await;
    let mut cases: Vec<(Value, &str)> = Vec::new();
    let mut unknown = instance("w1");
    unknown["scheduling"]["spot"] = json!(true);
    cases.push((unknown, "Unknown name \"spot\" at `scheduling`"));
    let mut wrong_type = instance("w1");
    wrong_type["disks"][0]["boot"] = json!("yes");
    cases.push((wrong_type, "field `disks[0].boot`: expected boolean"));
    let mut bad_enum = instance("w1");
    bad_enum["scheduling"]["provisioningModel"] = json!("PREEMPTIBLE");
    cases.push((
        bad_enum,
        "field `scheduling.provisioningModel`: invalid value `PREEMPTIBLE`",
    ));
    let mut bad_int = instance("w1");
    bad_int["disks"][0]["initializeParams"]["diskSizeGb"] = json!("fifty");
    cases.push((bad_int, "field `disks[0].initializeParams.diskSizeGb`"));
    let mut bad_name = instance("W_1");
    bad_name["name"] = json!("W_1");
    cases.push((bad_name, "field `name`: `W_1` does not match"));
    let mut no_name = instance("w1");
    no_name.as_object_mut().unwrap().remove("name");
    cases.push((
        no_name,
        "field `name` is required by compute.instances.insert",
    ));
    let mut bad_metadata = instance("w1");
    bad_metadata["metadata"] = json!({"items": [{"key": "startup-script"}]});
    cases.push((bad_metadata, "field `metadata.items[0].value` is required"));
    for (body, expected) in cases {
        let (status, answer) = client.call("POST", &insert_path(), Some(body)).await;
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(status, 400, "{answer}");
        assert!(message.contains(expected), "`{message}` lacks `{expected}`");
    }
    let (status, answer) = client
        .call("GET", &format!("{}?color=red", insert_path()), None)
        .await;
    assert_eq!(status, 400);
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown parameter `color`")
    );
    let (status, _) = client
        .call("GET", &format!("{}?maxResults=many", insert_path()), None)
        .await;
    assert_eq!(status, 400);
    let (status, _) = client
        .call(
            "PATCH",
            &format!("projects/{PROJECT}/zones/{ZONE}/instances/w1/colour"),
            None,
        )
        .await;
    assert_eq!(status, 404);
    assert!(fake.instances().is_empty());
    let (status, _) = client
        .call("POST", &insert_path(), Some(instance("w1")))
        .await;
    assert_eq!(status, 200, "the well-formed body is accepted");
}

#[tokio::test]
async fn requests_need_a_token_it_issued() {
    let fake = fake().await;
    let mut client = Client::new(&fake).await;
    client.token = "ya29.forged".into();
    let (status, answer) = client.call("GET", &insert_path(), None).await;
    assert_eq!(
        (status, answer["error"]["errors"][0]["reason"].as_str()),
        (401, Some("authError"))
    );
    let metadata = reqwest::get(format!(
        "{}/computeMetadata/v1/instance/service-accounts/default/token",
        fake.url()
    ))
    .await
    .unwrap();
    assert_eq!(metadata.status(), 403, "no Metadata-Flavor header");
}

fn assertion(claims: Value, key_pem: &str) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
    let claims = URL_SAFE_NO_PAD.encode(claims.to_string());
    let signed = format!("{header}.{claims}");
    let key = ring::signature::RsaKeyPair::from_pkcs8(&pem_to_der(key_pem)).unwrap();
    let mut signature = vec![0; key.public().modulus_len()];
    key.sign(
        &ring::signature::RSA_PKCS1_SHA256,
        &ring::rand::SystemRandom::new(),
        signed.as_bytes(),
        &mut signature,
    )
    .unwrap();
    format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature))
}

#[tokio::test]
async fn the_token_endpoint_verifies_the_jwt_signature() {
    let fake = fake().await;
    fake.test_key_file();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = json!({"iss": TEST_SERVICE_ACCOUNT, "aud": fake.token_url(),
        "scope": "https://www.googleapis.com/auth/compute", "iat": now, "exp": now + 3600});
    let grant = |assertion: String| {
        let url = fake.token_url();
        async move {
            let body = form_urlencoded::Serializer::new(String::new())
                .append_pair("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer")
                .append_pair("assertion", &assertion)
                .finish();
            let response = reqwest::Client::new()
                .post(url)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body)
                .send()
                .await
                .unwrap();
            (
                response.status().as_u16(),
                response.json::<Value>().await.unwrap(),
            )
        }
    };
    let (status, answer) = grant(assertion(claims.clone(), TEST_KEY_PEM)).await;
    assert_eq!(status, 200, "{answer}");
    // One character of the signature changed (not the last: its low bits are padding, and
    // it may already be the replacement).
    let mut tampered = assertion(claims.clone(), TEST_KEY_PEM).into_bytes();
    let at = tampered.len() - 10;
    tampered[at] = if tampered[at] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    let (status, answer) = grant(tampered).await;
    assert_eq!(
        (status, answer["error_description"].as_str()),
        (400, Some("Invalid JWT Signature."))
    );
    let mut wrong_aud = claims;
    wrong_aud["aud"] = json!("https://oauth2.googleapis.com/token");
    let (status, _) = grant(assertion(wrong_aud, TEST_KEY_PEM)).await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn instances_and_operations_move_and_answers_match_the_schemas() {
    let fake = fake().await;
    let client = Client::new(&fake).await;
    let doc = Discovery::compute();
    let (status, op) = client
        .call("POST", &insert_path(), Some(instance("w1")))
        .await;
    assert_eq!((status, op["status"].as_str()), (200, Some("RUNNING")));
    doc.check_schema("Operation", &op, None).unwrap();
    assert_eq!(fake.instance("w1").unwrap().status, "PROVISIONING");
    let op_path = format!(
        "projects/{PROJECT}/zones/{ZONE}/operations/{}",
        op["name"].as_str().unwrap()
    );
    let (_, done) = client.call("POST", &format!("{op_path}/wait"), None).await;
    assert_eq!(done["status"], "DONE");
    assert_eq!(fake.instance("w1").unwrap().status, "RUNNING");

    let filter = "(labels.codalab-wm-manager = \"m1\") AND (labels.codalab-wm-pool = \"default\")";
    fake.insert_instance(ZONE, "other", &[("codalab-wm-manager", "m2")], "RUNNING");
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("filter", filter)
        .finish();
    let (status, list) = client
        .call(
            "GET",
            &format!("projects/{PROJECT}/aggregated/instances?{query}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{list}");
    doc.check_schema("InstanceAggregatedList", &list, None)
        .unwrap();
    let names: Vec<&str> = list["items"][format!("zones/{ZONE}")]["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["w1"]);

    fake.preempt("w1");
    assert_eq!(
        fake.instance("w1").unwrap().status,
        "STOPPING",
        "DELETE action"
    );
    client.call("GET", &insert_path(), None).await;
    assert!(
        fake.instance("w1").is_none(),
        "deleted once the operation is done"
    );
    let (_, ops) = client
        .call(
            "GET",
            &format!(
                "projects/{PROJECT}/aggregated/operations?filter={}",
                percent_encode("operationType = \"compute.instances.preempted\"")
            ),
            None,
        )
        .await;
    doc.check_schema("OperationAggregatedList", &ops, None)
        .unwrap();
    assert_eq!(
        ops["items"][format!("zones/{ZONE}")]["operations"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

fn percent_encode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

#[tokio::test]
async fn exhaustion_faults_and_paging() {
    let fake = fake().await;
    let client = Client::new(&fake).await;
    fake.exhaust_zone(ZONE);
    let (_, op) = client
        .call("POST", &insert_path(), Some(instance("w1")))
        .await;
    let op_path = format!(
        "projects/{PROJECT}/zones/{ZONE}/operations/{}",
        op["name"].as_str().unwrap()
    );
    let (_, done) = client.call("GET", &op_path, None).await;
    assert_eq!(
        done["error"]["errors"][0]["code"],
        "ZONE_RESOURCE_POOL_EXHAUSTED"
    );
    assert!(fake.instances().is_empty());

    fake.push_fault(Fault::new(503, "backendError"));
    let (status, _) = client.call("GET", &insert_path(), None).await;
    assert_eq!(status, 503);
    for name in ["a", "b", "c"] {
        fake.insert_instance(ZONE, name, &[], "RUNNING");
    }
    fake.set_page_size(2);
    let (_, first) = client.call("GET", &insert_path(), None).await;
    assert_eq!(first["items"].as_array().unwrap().len(), 2);
    let token = first["nextPageToken"].as_str().unwrap();
    let (_, second) = client
        .call("GET", &format!("{}?pageToken={token}", insert_path()), None)
        .await;
    assert_eq!(second["items"].as_array().unwrap().len(), 1);
    assert!(second.get("nextPageToken").is_none());
}
