import copy
from typing import Optional


class InsurancePolicyDesk:
    """Back office of a small insurer: customers, their policies, the coverages on each policy and
    the claims filed against them. Customers and policies are known to people by name and policy
    number; the tools address them by internal ids.

    Rules:
    - Only active policies can be changed, claimed against or cancelled.
    - A coverage limit must be positive and at most the policy's max_coverage_limit.
    - A deductible must be zero or more and below the coverage limit.
    - A claim amount must be positive and at most the coverage limit.
    - Claim status moves submitted -> approved or rejected, and approved -> paid.
    - A policy with claims still submitted (undecided) cannot be cancelled.
    """

    CLAIM_TRANSITIONS = {"submitted": ["approved", "rejected"], "approved": ["paid"]}

    def __init__(self, init_config: Optional[dict] = None):
        self.customers = {}
        self.policies = {}
        self.claims = {}
        for key, value in (init_config or {}).items():
            setattr(self, key, copy.deepcopy(value))

    # -- helpers (not tools) --

    def _active_policy(self, policy_id):
        policy = self.policies.get(policy_id)
        if policy is None:
            return None, {"success": False, "error": f"Policy id '{policy_id}' not found."}
        if policy["status"] != "active":
            return None, {"success": False, "error": f"Policy '{policy_id}' is {policy['status']}, not active."}
        return policy, None

    def _coverage(self, policy, policy_id, coverage_id):
        coverage = policy["coverages"].get(coverage_id)
        if coverage is None:
            return None, {"success": False,
                          "error": f"Coverage '{coverage_id}' not found on policy '{policy_id}'."}
        return coverage, None

    # -- query tools --

    def find_customer(self, name: str) -> dict:
        """Find customers whose name contains the given text (case-insensitive).

        Args:
            name: Full or partial customer name.
        """
        needle = name.strip().lower()
        found = [{"customer_id": cid, **c} for cid, c in self.customers.items() if needle in c["name"].lower()]
        if not found:
            return {"success": False, "error": f"No customer matches '{name}'."}
        return {"success": True, "data": found}

    def get_policy_by_number(self, policy_number: str) -> dict:
        """Look up a policy by its policy number; returns its internal id, status and coverages.

        Args:
            policy_number: The policy number printed on the policy, e.g. 'HP-2201'.
        """
        for pid, policy in self.policies.items():
            if policy["policy_number"] == policy_number:
                return {"success": True, "data": {"policy_id": pid, **copy.deepcopy(policy)}}
        return {"success": False, "error": f"No policy with number '{policy_number}'."}

    def list_customer_policies(self, customer_id: str) -> dict:
        """List the policies held by a customer.

        Args:
            customer_id: Internal customer id (see find_customer).
        """
        if customer_id not in self.customers:
            return {"success": False, "error": f"Customer id '{customer_id}' not found."}
        found = [{"policy_id": pid, "policy_number": p["policy_number"], "type": p["type"], "status": p["status"]}
                 for pid, p in self.policies.items() if p["customer_id"] == customer_id]
        return {"success": True, "data": found}

    def list_claims(self, policy_id: str, status: Optional[str] = None) -> dict:
        """List the claims filed against a policy, optionally only those with a given status.

        Args:
            policy_id: Internal policy id.
            status: Optional filter: submitted, approved, rejected or paid.
        """
        if policy_id not in self.policies:
            return {"success": False, "error": f"Policy id '{policy_id}' not found."}
        found = [{"claim_id": cid, **c} for cid, c in self.claims.items()
                 if c["policy_id"] == policy_id and (status is None or c["status"] == status)]
        return {"success": True, "data": found}

    # -- modification tools --

    def update_coverage_limit(self, policy_id: str, coverage_id: str, new_limit: float) -> dict:
        """Set a new limit on one coverage of an active policy.

        Args:
            policy_id: Internal policy id.
            coverage_id: Coverage id on that policy.
            new_limit: New limit in USD.
        """
        policy, error = self._active_policy(policy_id)
        if error:
            return error
        coverage, error = self._coverage(policy, policy_id, coverage_id)
        if error:
            return error
        if not 0 < new_limit <= policy["max_coverage_limit"]:
            return {"success": False, "error": f"Limit must be positive and at most {policy['max_coverage_limit']}."}
        if coverage["deductible"] >= new_limit:
            return {"success": False, "error": "Limit must stay above the deductible."}
        coverage["limit"] = new_limit
        return {"success": True, "data": {"coverage_id": coverage_id, **coverage}}

    def update_deductible(self, policy_id: str, coverage_id: str, new_deductible: float) -> dict:
        """Set a new deductible on one coverage of an active policy.

        Args:
            policy_id: Internal policy id.
            coverage_id: Coverage id on that policy.
            new_deductible: New deductible in USD.
        """
        policy, error = self._active_policy(policy_id)
        if error:
            return error
        coverage, error = self._coverage(policy, policy_id, coverage_id)
        if error:
            return error
        if not 0 <= new_deductible < coverage["limit"]:
            return {"success": False, "error": "Deductible must be zero or more and below the coverage limit."}
        coverage["deductible"] = new_deductible
        return {"success": True, "data": {"coverage_id": coverage_id, **coverage}}

    def file_claim(self, policy_id: str, coverage_id: str, amount: float, description: str) -> dict:
        """File a new claim against one coverage of an active policy; it starts as submitted.

        Args:
            policy_id: Internal policy id.
            coverage_id: Coverage id the claim falls under.
            amount: Claimed amount in USD.
            description: Short description of the incident.
        """
        policy, error = self._active_policy(policy_id)
        if error:
            return error
        coverage, error = self._coverage(policy, policy_id, coverage_id)
        if error:
            return error
        if not 0 < amount <= coverage["limit"]:
            return {"success": False, "error": f"Amount must be positive and at most the limit {coverage['limit']}."}
        n = len(self.claims) + 1
        while f"CL-{n:04d}" in self.claims:
            n += 1
        claim_id = f"CL-{n:04d}"
        self.claims[claim_id] = {"policy_id": policy_id, "coverage_id": coverage_id, "amount": amount,
                                 "description": description, "status": "submitted"}
        return {"success": True, "data": {"claim_id": claim_id, **self.claims[claim_id]}}

    def update_claim_status(self, claim_id: str, new_status: str) -> dict:
        """Move a claim to its next status (submitted -> approved/rejected, approved -> paid).

        Args:
            claim_id: Claim id.
            new_status: approved, rejected or paid.
        """
        claim = self.claims.get(claim_id)
        if claim is None:
            return {"success": False, "error": f"Claim '{claim_id}' not found."}
        allowed = self.CLAIM_TRANSITIONS.get(claim["status"], [])
        if new_status not in allowed:
            return {"success": False,
                    "error": f"Cannot move claim from {claim['status']} to {new_status}; allowed: {allowed}."}
        claim["status"] = new_status
        return {"success": True, "data": {"claim_id": claim_id, **claim}}

    def cancel_policy(self, policy_id: str, reason: str) -> dict:
        """Cancel an active policy that has no undecided (submitted) claims.

        Args:
            policy_id: Internal policy id.
            reason: Why the policy is cancelled.
        """
        policy, error = self._active_policy(policy_id)
        if error:
            return error
        pending = [cid for cid, c in self.claims.items() if c["policy_id"] == policy_id and c["status"] == "submitted"]
        if pending:
            return {"success": False, "error": f"Policy has undecided claims {pending}; decide them first."}
        policy["status"] = "cancelled"
        policy["cancel_reason"] = reason
        return {"success": True, "data": {"policy_id": policy_id, "status": "cancelled"}}

    def update_contact(self, customer_id: str, email: Optional[str] = None, phone: Optional[str] = None) -> dict:
        """Change a customer's email and/or phone number.

        Args:
            customer_id: Internal customer id.
            email: New email address (must contain '@').
            phone: New phone number.
        """
        customer = self.customers.get(customer_id)
        if customer is None:
            return {"success": False, "error": f"Customer id '{customer_id}' not found."}
        if email is None and phone is None:
            return {"success": False, "error": "Give an email, a phone number or both."}
        if email is not None:
            if "@" not in email:
                return {"success": False, "error": f"'{email}' is not a valid email address."}
            customer["email"] = email
        if phone is not None:
            customer["phone"] = phone
        return {"success": True, "data": {"customer_id": customer_id, **customer}}
