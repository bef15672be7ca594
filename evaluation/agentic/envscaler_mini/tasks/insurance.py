"""Insurance: policies found by number or by customer name, then coverages, claims and contacts."""

from ._common import TaskBook, call, check

ENV_CLASS = "InsurancePolicyDesk"

INIT_CONFIG = {
    "customers": {
        "C-7341": {"name": "Maria Lopez", "email": "maria.lopez@mail.com", "phone": "555-0101"},
        "C-2290": {"name": "Tom Becker", "email": "tbecker@mail.com", "phone": "555-0144"},
        "C-5512": {"name": "Aisha Khan", "email": "aisha.k@mail.com", "phone": "555-0178"},
        "C-8803": {"name": "Jonas Berg", "email": "jonas.berg@mail.com", "phone": "555-0192"},
    },
    "policies": {
        "P-91a": {"policy_number": "HP-2201", "customer_id": "C-7341", "type": "home", "status": "active",
                  "max_coverage_limit": 500000, "coverages": {
                      "CV-11": {"name": "dwelling", "limit": 300000, "deductible": 1000},
                      "CV-12": {"name": "contents", "limit": 50000, "deductible": 500},
                      "CV-13": {"name": "liability", "limit": 100000, "deductible": 0}}},
        "P-47c": {"policy_number": "AU-3310", "customer_id": "C-7341", "type": "auto", "status": "active",
                  "max_coverage_limit": 100000, "coverages": {
                      "CV-21": {"name": "collision", "limit": 25000, "deductible": 500},
                      "CV-22": {"name": "glass", "limit": 2000, "deductible": 100}}},
        "P-18e": {"policy_number": "AU-3342", "customer_id": "C-2290", "type": "auto", "status": "active",
                  "max_coverage_limit": 100000, "coverages": {
                      "CV-31": {"name": "collision", "limit": 20000, "deductible": 1000},
                      "CV-32": {"name": "theft", "limit": 15000, "deductible": 250}}},
        "P-63b": {"policy_number": "TR-4107", "customer_id": "C-5512", "type": "travel", "status": "active",
                  "max_coverage_limit": 20000, "coverages": {
                      "CV-41": {"name": "medical", "limit": 10000, "deductible": 0},
                      "CV-42": {"name": "baggage", "limit": 1500, "deductible": 50}}},
        "P-22d": {"policy_number": "HP-2234", "customer_id": "C-8803", "type": "home", "status": "active",
                  "max_coverage_limit": 400000, "coverages": {
                      "CV-51": {"name": "dwelling", "limit": 250000, "deductible": 2000},
                      "CV-52": {"name": "contents", "limit": 40000, "deductible": 500}}},
        "P-75f": {"policy_number": "LF-5020", "customer_id": "C-2290", "type": "life", "status": "lapsed",
                  "max_coverage_limit": 250000, "coverages": {
                      "CV-61": {"name": "death benefit", "limit": 200000, "deductible": 0}}},
    },
    "claims": {
        "CL-0001": {"policy_id": "P-47c", "coverage_id": "CV-22", "amount": 450,
                    "description": "cracked windscreen", "status": "submitted"},
        "CL-0002": {"policy_id": "P-63b", "coverage_id": "CV-42", "amount": 300,
                    "description": "delayed suitcase", "status": "approved"},
        "CL-0003": {"policy_id": "P-22d", "coverage_id": "CV-52", "amount": 1200,
                    "description": "stolen bicycle", "status": "submitted"},
        "CL-0004": {"policy_id": "P-18e", "coverage_id": "CV-31", "amount": 3800,
                    "description": "rear-end collision", "status": "submitted"},
        "CL-0005": {"policy_id": "P-91a", "coverage_id": "CV-11", "amount": 5000,
                    "description": "roof storm damage", "status": "paid"},
    },
}

# policy number -> (policy id, {coverage name: coverage id}, customer id)
POLICIES = {p["policy_number"]: (pid, {c["name"]: cid for cid, c in p["coverages"].items()}, p["customer_id"])
            for pid, p in INIT_CONFIG["policies"].items()}
CUSTOMER_NAME = {cid: c["name"] for cid, c in INIT_CONFIG["customers"].items()}


def _cov(pid: str, cid: str) -> str:
    return f"s['policies'][{pid!r}]['coverages'][{cid!r}]"


def build(book: TaskBook) -> None:
    # Change a coverage limit, policy given by number.
    for number, cov, limit in [("HP-2201", "contents", 75000), ("AU-3310", "collision", 30000),
                               ("AU-3342", "theft", 18000), ("TR-4107", "medical", 15000),
                               ("HP-2234", "dwelling", 280000), ("HP-2201", "liability", 150000)]:
        pid, covs, _ = POLICIES[number]
        ded = INIT_CONFIG["policies"][pid]["coverages"][covs[cov]]["deductible"]
        book.add(f"Policy {number}: the customer asked to change the {cov} coverage limit to ${limit:,}. "
                 f"Leave the deductible as it is.",
                 [check(f"{cov} limit on {number} is {limit}", f"{_cov(pid, covs[cov])}['limit'] == {limit}"),
                  check(f"{cov} deductible on {number} unchanged", f"{_cov(pid, covs[cov])}['deductible'] == {ded}")],
                 [call("get_policy_by_number", policy_number=number),
                  call("update_coverage_limit", policy_id=pid, coverage_id=covs[cov], new_limit=limit)])

    # Change a deductible, policy found through the customer's name and policy type.
    for number, cov, ded in [("AU-3310", "glass", 0), ("AU-3342", "collision", 500), ("TR-4107", "baggage", 0),
                             ("HP-2234", "dwelling", 1000), ("HP-2201", "contents", 250)]:
        pid, covs, cust = POLICIES[number]
        kind = INIT_CONFIG["policies"][pid]["type"]
        book.add(f"{CUSTOMER_NAME[cust]} called about their {kind} policy: set the deductible of its {cov} "
                 f"coverage to ${ded:,}. They don't know the policy number.",
                 [check(f"{cov} deductible on {number} is {ded}", f"{_cov(pid, covs[cov])}['deductible'] == {ded}")],
                 [call("find_customer", name=CUSTOMER_NAME[cust]),
                  call("list_customer_policies", customer_id=cust),
                  call("get_policy_by_number", policy_number=number),
                  call("update_deductible", policy_id=pid, coverage_id=covs[cov], new_deductible=ded)])

    # File a new claim.
    for number, cov, amount, desc in [("AU-3342", "theft", 2400, "stolen catalytic converter"),
                                      ("HP-2201", "contents", 3200, "water-damaged laptop"),
                                      ("TR-4107", "medical", 850, "emergency room visit in Lisbon"),
                                      ("HP-2234", "dwelling", 7600, "burst pipe in the basement"),
                                      ("AU-3310", "collision", 4100, "parking lot collision")]:
        pid, covs, _ = POLICIES[number]
        before = sum(1 for c in INIT_CONFIG["claims"].values() if c["policy_id"] == pid)
        book.add(f"File a claim of ${amount:,} on policy {number} under its {cov} coverage. "
                 f"Description: {desc}.",
                 [check(f"a submitted {cov} claim of {amount} exists on {number}",
                        f"any(c['policy_id'] == {pid!r} and c['coverage_id'] == {covs[cov]!r} and "
                        f"c['amount'] == {amount} and c['status'] == 'submitted' for c in s['claims'].values())"),
                  check(f"exactly one new claim on {number}",
                        f"sum(1 for c in s['claims'].values() if c['policy_id'] == {pid!r}) == {before + 1}")],
                 [call("get_policy_by_number", policy_number=number),
                  call("file_claim", policy_id=pid, coverage_id=covs[cov], amount=amount, description=desc)])

    # Settle a claim: approve (if still submitted) and pay.
    for claim_id in ["CL-0001", "CL-0003", "CL-0004", "CL-0002"]:
        claim = INIT_CONFIG["claims"][claim_id]
        number = INIT_CONFIG["policies"][claim["policy_id"]]["policy_number"]
        steps = [call("get_policy_by_number", policy_number=number),
                 call("list_claims", policy_id=claim["policy_id"])]
        if claim["status"] == "submitted":
            steps.append(call("update_claim_status", claim_id=claim_id, new_status="approved"))
        steps.append(call("update_claim_status", claim_id=claim_id, new_status="paid"))
        book.add(f"The {claim['description']} claim on policy {number} has been verified. Make sure it is "
                 f"approved and then record it as paid.",
                 [check(f"{claim_id} is paid", f"s['claims'][{claim_id!r}]['status'] == 'paid'")], steps)

    # Cancel a policy; undecided claims must be rejected first.
    for number, reason in [("AU-3310", "vehicle sold"), ("HP-2234", "moved abroad"),
                           ("AU-3342", "switched insurer")]:
        pid, _, _ = POLICIES[number]
        pending = [cid for cid, c in INIT_CONFIG["claims"].items()
                   if c["policy_id"] == pid and c["status"] == "submitted"]
        book.add(f"Cancel policy {number} (reason: {reason}). Any claim on it still waiting for a decision "
                 f"must be rejected before the cancellation.",
                 [check(f"{number} is cancelled", f"s['policies'][{pid!r}]['status'] == 'cancelled'")]
                 + [check(f"claim {cid} is rejected", f"s['claims'][{cid!r}]['status'] == 'rejected'") for cid in pending],
                 [call("get_policy_by_number", policy_number=number),
                  call("list_claims", policy_id=pid, status="submitted")]
                 + [call("update_claim_status", claim_id=cid, new_status="rejected") for cid in pending]
                 + [call("cancel_policy", policy_id=pid, reason=reason)])
    for number, reason in [("HP-2201", "house sold"), ("TR-4107", "trip called off")]:
        pid, _, _ = POLICIES[number]
        book.add(f"Cancel policy {number}; the reason is: {reason}. Do not change any of its claims.",
                 [check(f"{number} is cancelled", f"s['policies'][{pid!r}]['status'] == 'cancelled'"),
                  check(f"claims on {number} unchanged",
                        f"all(s['claims'][k]['status'] == v for k, v in "
                        f"{ {k: c['status'] for k, c in INIT_CONFIG['claims'].items() if c['policy_id'] == pid}!r}.items())")],
                 [call("get_policy_by_number", policy_number=number),
                  call("list_claims", policy_id=pid, status="submitted"),
                  call("cancel_policy", policy_id=pid, reason=reason)])

    # Contact changes.
    for cust, email, phone in [("C-5512", "aisha.khan@newmail.org", None), ("C-8803", None, "555-0230"),
                               ("C-2290", "tom.becker@work.net", "555-0311"), ("C-7341", None, "555-0999")]:
        name = CUSTOMER_NAME[cust]
        what = " and ".join(x for x in [email and f"email to {email}", phone and f"phone number to {phone}"] if x)
        checks, args = [], {}
        if email:
            checks.append(check(f"{name}'s email updated", f"s['customers'][{cust!r}]['email'] == {email!r}"))
            args["email"] = email
        if phone:
            checks.append(check(f"{name}'s phone updated", f"s['customers'][{cust!r}]['phone'] == {phone!r}"))
            args["phone"] = phone
        book.add(f"Update the contact details of customer {name}: change the {what}.", checks,
                 [call("find_customer", name=name), call("update_contact", customer_id=cust, **args)])

    # Two-part requests.
    book.add("Jonas Berg's stolen bicycle claim on his home policy checks out: approve it. Also raise the "
             "contents limit of that same policy to $45,000.",
             [check("CL-0003 approved", "s['claims']['CL-0003']['status'] == 'approved'"),
              check("HP-2234 contents limit 45000", f"{_cov('P-22d', 'CV-52')}['limit'] == 45000")],
             [call("find_customer", name="Jonas Berg"), call("list_customer_policies", customer_id="C-8803"),
              call("get_policy_by_number", policy_number="HP-2234"), call("list_claims", policy_id="P-22d"),
              call("update_claim_status", claim_id="CL-0003", new_status="approved"),
              call("update_coverage_limit", policy_id="P-22d", coverage_id="CV-52", new_limit=45000)])
    book.add("Tom Becker wants the collision deductible on his auto policy lowered to $750, and he reports "
             "a stolen car stereo worth $1,900 to claim under the same policy's theft coverage.",
             [check("AU-3342 collision deductible 750", f"{_cov('P-18e', 'CV-31')}['deductible'] == 750"),
              check("theft claim of 1900 filed",
                    "any(c['policy_id'] == 'P-18e' and c['coverage_id'] == 'CV-32' and c['amount'] == 1900 "
                    "for c in s['claims'].values())")],
             [call("find_customer", name="Tom Becker"), call("list_customer_policies", customer_id="C-2290"),
              call("get_policy_by_number", policy_number="AU-3342"),
              call("update_deductible", policy_id="P-18e", coverage_id="CV-31", new_deductible=750),
              call("file_claim", policy_id="P-18e", coverage_id="CV-32", amount=1900,
                   description="stolen car stereo")])
