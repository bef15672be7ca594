"""HR: employees by name, departments by name, then leave, transfers, salaries and titles."""

from ._common import TaskBook, call, check

ENV_CLASS = "HRPortal"


def _emp(name, dept, title, salary, manager, balance, status="active"):
    return {"name": name, "department_id": dept, "title": title, "salary": salary, "manager_id": manager,
            "status": status, "leave_balance": balance}


def _req(employee, start, end, days, status):
    return {"employee_id": employee, "start_date": start, "end_date": end, "days": days, "status": status}


INIT_CONFIG = {
    "departments": {"DP-1": {"name": "Engineering", "head_id": "E-104"},
                    "DP-2": {"name": "Marketing", "head_id": "E-110"},
                    "DP-3": {"name": "Finance", "head_id": "E-115"},
                    "DP-4": {"name": "Customer Support", "head_id": "E-120"}},
    "employees": {
        "E-104": _emp("Grace Hopkins", "DP-1", "Engineering Manager", 128000, None, 18),
        "E-105": _emp("Liam O'Brien", "DP-1", "Software Engineer", 95000, "E-104", 12),
        "E-106": _emp("Zara Ahmed", "DP-1", "Senior Software Engineer", 112000, "E-104", 3),
        "E-110": _emp("Marco Bianchi", "DP-2", "Marketing Director", 121000, None, 20),
        "E-111": _emp("Chen Wei", "DP-2", "Content Strategist", 68000, "E-110", 9),
        "E-115": _emp("Ruth Adeyemi", "DP-3", "Finance Lead", 117000, None, 15),
        "E-116": _emp("Oscar Nilsson", "DP-3", "Accountant", 72000, "E-115", 0, "on_leave"),
        "E-120": _emp("Hana Suzuki", "DP-4", "Support Manager", 83000, None, 14),
        "E-121": _emp("Peter Novak", "DP-4", "Support Agent", 47000, "E-120", 6),
    },
    "leave_requests": {
        "LR-31": _req("E-105", "2025-06-02", "2025-06-06", 5, "pending"),
        "LR-32": _req("E-106", "2025-05-19", "2025-05-23", 5, "pending"),
        "LR-33": _req("E-111", "2025-07-14", "2025-07-18", 5, "pending"),
        "LR-34": _req("E-121", "2025-05-26", "2025-05-27", 2, "approved"),
        "LR-35": _req("E-121", "2025-08-04", "2025-08-08", 5, "pending"),
    },
}

EMPLOYEES = INIT_CONFIG["employees"]
EMP = {e["name"]: eid for eid, e in EMPLOYEES.items()}
DEPT = {d["name"]: did for did, d in INIT_CONFIG["departments"].items()}


def _field(eid: str, key: str) -> str:
    return f"s['employees'][{eid!r}][{key!r}]"


def _status(rid: str, status: str) -> dict:
    return check(f"{rid} {status}", f"s['leave_requests'][{rid!r}]['status'] == {status!r}")


def _balance(eid: str, value: int) -> dict:
    return check(f"{eid} leave balance {value}", f"{_field(eid, 'leave_balance')} == {value}")


def _pending_of(eid: str) -> str:
    return next(r for r, x in INIT_CONFIG["leave_requests"].items() if x["employee_id"] == eid and x["status"] == "pending")


def build(book: TaskBook) -> None:
    # Approve the pending request of an employee.
    for name in ["Liam O'Brien", "Chen Wei", "Peter Novak"]:
        eid = EMP[name]
        rid = _pending_of(eid)
        req = INIT_CONFIG["leave_requests"][rid]
        book.add(f"Approve {name}'s pending leave request ({req['start_date']} to {req['end_date']}).",
                 [_status(rid, "approved"), _balance(eid, EMPLOYEES[eid]["leave_balance"] - req["days"])],
                 [call("search_employees", name=name), call("list_leave_requests", employee_id=eid, status="pending"),
                  call("approve_leave", request_id=rid)])
    book.add("Review Zara Ahmed's pending leave request: approve it if her leave balance covers it, otherwise "
             "reject it with the reason 'insufficient leave balance'.",
             [_status("LR-32", "rejected"), _balance("E-106", 3)],
             [call("search_employees", name="Zara Ahmed"), call("list_leave_requests", employee_id="E-106", status="pending"),
              call("reject_leave", request_id="LR-32", reason="insufficient leave balance")])
    book.add("Process every pending leave request in the Engineering department: approve each one the "
             "employee's balance covers and reject the others (reason: 'insufficient leave balance').",
             [_status("LR-31", "approved"), _status("LR-32", "rejected"), _balance("E-105", 7)],
             [call("get_department", name="Engineering"), call("search_employees", department_id="DP-1"),
              call("list_leave_requests", status="pending"), call("approve_leave", request_id="LR-31"),
              call("reject_leave", request_id="LR-32", reason="insufficient leave balance")])
    book.add("Reject Chen Wei's pending leave request; the reason is the product launch that week.",
             [_status("LR-33", "rejected"), _balance("E-111", 9)],
             [call("search_employees", name="Chen Wei"), call("list_leave_requests", employee_id="E-111", status="pending"),
              call("reject_leave", request_id="LR-33", reason="product launch that week")])

    # Submit new requests.
    for name, start, end in [("Hana Suzuki", "2025-06-16", "2025-06-20"), ("Chen Wei", "2025-09-01", "2025-09-03"),
                             ("Ruth Adeyemi", "2025-12-22", "2025-12-24"), ("Grace Hopkins", "2025-07-07", "2025-07-11")]:
        eid = EMP[name]
        book.add(f"Submit a leave request for {name} from {start} to {end}.",
                 [check("pending request with those dates",
                        f"any(r['employee_id'] == {eid!r} and r['start_date'] == {start!r} and r['end_date'] == {end!r} "
                        f"and r['status'] == 'pending' for r in s['leave_requests'].values())")],
                 [call("search_employees", name=name),
                  call("submit_leave_request", employee_id=eid, start_date=start, end_date=end)])
    book.add("Peter Novak needs 2025-10-06 and 2025-10-07 off. Submit the leave request and approve it.",
             [check("approved request for those dates",
                    "any(r['employee_id'] == 'E-121' and r['start_date'] == '2025-10-06' and r['end_date'] == '2025-10-07' "
                    "and r['status'] == 'approved' for r in s['leave_requests'].values())"), _balance("E-121", 4)],
             [call("search_employees", name="Peter Novak"),
              call("submit_leave_request", employee_id="E-121", start_date="2025-10-06", end_date="2025-10-07"),
              call("approve_leave", request_id="LR-36")])

    # Transfers.
    for name, dept in [("Liam O'Brien", "Marketing"), ("Peter Novak", "Engineering"), ("Chen Wei", "Customer Support"),
                       ("Zara Ahmed", "Finance")]:
        eid, did = EMP[name], DEPT[dept]
        head = INIT_CONFIG["departments"][did]["head_id"]
        book.add(f"Transfer {name} to the {dept} department.",
                 [check(f"{eid} in {did}", f"{_field(eid, 'department_id')} == {did!r}"),
                  check(f"{eid} reports to {head}", f"{_field(eid, 'manager_id')} == {head!r}")],
                 [call("search_employees", name=name), call("get_department", name=dept),
                  call("transfer_employee", employee_id=eid, department_id=did)])

    # Salaries.
    for name, new, text in [("Peter Novak", 51000, "to $51,000"), ("Chen Wei", 71400, "by 5%"),
                            ("Liam O'Brien", 104500, "by 10%"), ("Zara Ahmed", 125000, "to $125,000"),
                            ("Hana Suzuki", 88810, "by 7%"), ("Peter Novak", 54050, "by the largest amount allowed in one step")]:
        eid = EMP[name]
        book.add(f"Raise {name}'s salary {text}.",
                 [check(f"{eid} salary {new}", f"{_field(eid, 'salary')} == {new}")],
                 [call("search_employees", name=name), call("update_salary", employee_id=eid, new_salary=new)])

    # Titles and department heads.
    book.add("Promote Liam O'Brien: his new title is 'Senior Software Engineer'.",
             [check("E-105 title", f"{_field('E-105', 'title')} == 'Senior Software Engineer'")],
             [call("search_employees", name="Liam O'Brien"),
              call("update_title", employee_id="E-105", title="Senior Software Engineer")])
    book.add("Promote Peter Novak to 'Senior Support Agent' with a salary of $52,000.",
             [check("E-121 title", f"{_field('E-121', 'title')} == 'Senior Support Agent'"),
              check("E-121 salary 52000", f"{_field('E-121', 'salary')} == 52000")],
             [call("search_employees", name="Peter Novak"),
              call("update_title", employee_id="E-121", title="Senior Support Agent"),
              call("update_salary", employee_id="E-121", new_salary=52000)])
    book.add("Give the head of the Finance department a 3% raise.",
             [check("E-115 salary 120510", f"{_field('E-115', 'salary')} == 120510")],
             [call("get_department", name="Finance"), call("search_employees", department_id="DP-3"),
              call("update_salary", employee_id="E-115", new_salary=120510)])
    book.add("Change the job title of the head of Customer Support to 'Head of Customer Support'.",
             [check("E-120 title", f"{_field('E-120', 'title')} == 'Head of Customer Support'")],
             [call("get_department", name="Customer Support"),
              call("update_title", employee_id="E-120", title="Head of Customer Support")])
