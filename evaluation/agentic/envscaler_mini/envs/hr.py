import copy
from datetime import date, timedelta
from typing import Optional


class HRPortal:
    """HR administration portal: departments (each with a head), employees with salary, title,
    manager and leave balance (in working days), and leave requests. Dates are 'YYYY-MM-DD'.

    Rules:
    - A leave request counts the working days (Monday to Friday) from start to end, inclusive.
    - Only active employees can request leave or be transferred.
    - A pending request can be approved only if the employee's leave_balance covers its days;
      approval deducts them. Decided requests cannot be decided again.
    - A transferred employee reports to the head of the new department.
    - A salary can only go up, by at most 15% at a time.
    """

    MAX_RAISE = 0.15

    def __init__(self, init_config: Optional[dict] = None):
        self.departments = {}
        self.employees = {}
        self.leave_requests = {}
        for key, value in (init_config or {}).items():
            setattr(self, key, copy.deepcopy(value))

    def _employee(self, employee_id):
        employee = self.employees.get(employee_id)
        if employee is None:
            return None, {"success": False, "error": f"Employee id '{employee_id}' not found."}
        return employee, None

    def _pending(self, request_id):
        request = self.leave_requests.get(request_id)
        if request is None:
            return None, {"success": False, "error": f"Leave request '{request_id}' not found."}
        if request["status"] != "pending":
            return None, {"success": False, "error": f"Request is already {request['status']}."}
        return request, None

    # -- query tools --

    def search_employees(self, name: Optional[str] = None, department_id: Optional[str] = None) -> dict:
        """Find employees by (part of) their name and/or by department.

        Args:
            name: Optional full or partial employee name.
            department_id: Optional internal department id.
        """
        if name is None and department_id is None:
            return {"success": False, "error": "Give a name, a department id or both."}
        found = [{"employee_id": eid, **e} for eid, e in self.employees.items()
                 if (name is None or name.strip().lower() in e["name"].lower())
                 and (department_id is None or e["department_id"] == department_id)]
        if not found:
            return {"success": False, "error": "No employee matches."}
        return {"success": True, "data": found}

    def get_department(self, name: str) -> dict:
        """Look up a department by name; returns its id and the id and name of its head.

        Args:
            name: Department name, e.g. 'Finance'.
        """
        for did, dept in self.departments.items():
            if dept["name"].lower() == name.strip().lower():
                head = self.employees.get(dept["head_id"], {}).get("name")
                return {"success": True, "data": {"department_id": did, **dept, "head_name": head}}
        return {"success": False, "error": f"No department named '{name}'."}

    def list_leave_requests(self, employee_id: Optional[str] = None, status: Optional[str] = None) -> dict:
        """List leave requests, optionally for one employee and/or with one status.

        Args:
            employee_id: Optional internal employee id.
            status: Optional filter: pending, approved or rejected.
        """
        found = [{"request_id": rid, **r} for rid, r in self.leave_requests.items()
                 if (employee_id is None or r["employee_id"] == employee_id)
                 and (status is None or r["status"] == status)]
        return {"success": True, "data": found}

    # -- modification tools --

    def submit_leave_request(self, employee_id: str, start_date: str, end_date: str) -> dict:
        """Create a pending leave request for an active employee.

        Args:
            employee_id: Internal employee id.
            start_date: First day of leave, 'YYYY-MM-DD'.
            end_date: Last day of leave, 'YYYY-MM-DD'.
        """
        employee, error = self._employee(employee_id)
        if error:
            return error
        if employee["status"] != "active":
            return {"success": False, "error": f"Employee is {employee['status']}."}
        try:
            start, end = date.fromisoformat(start_date), date.fromisoformat(end_date)
        except ValueError:
            return {"success": False, "error": "Dates must be 'YYYY-MM-DD'."}
        days = sum(1 for i in range((end - start).days + 1) if (start + timedelta(days=i)).weekday() < 5)
        if days < 1:
            return {"success": False, "error": "The request covers no working day."}
        n = 30 + len(self.leave_requests) + 1
        while f"LR-{n}" in self.leave_requests:
            n += 1
        self.leave_requests[f"LR-{n}"] = {"employee_id": employee_id, "start_date": start_date,
                                          "end_date": end_date, "days": days, "status": "pending"}
        return {"success": True, "data": {"request_id": f"LR-{n}", **self.leave_requests[f"LR-{n}"]}}

    def approve_leave(self, request_id: str) -> dict:
        """Approve a pending leave request and deduct its days from the employee's balance.

        Args:
            request_id: Leave request id.
        """
        request, error = self._pending(request_id)
        if error:
            return error
        employee = self.employees[request["employee_id"]]
        if request["days"] > employee["leave_balance"]:
            return {"success": False, "error": f"Needs {request['days']} days; balance is {employee['leave_balance']}."}
        employee["leave_balance"] -= request["days"]
        request["status"] = "approved"
        return {"success": True, "data": {"request_id": request_id, **request,
                                          "leave_balance": employee["leave_balance"]}}

    def reject_leave(self, request_id: str, reason: str) -> dict:
        """Reject a pending leave request.

        Args:
            request_id: Leave request id.
            reason: Why it is rejected.
        """
        request, error = self._pending(request_id)
        if error:
            return error
        request["status"] = "rejected"
        request["reason"] = reason
        return {"success": True, "data": {"request_id": request_id, **request}}

    def transfer_employee(self, employee_id: str, department_id: str) -> dict:
        """Move an active employee to another department, reporting to its head.

        Args:
            employee_id: Internal employee id.
            department_id: Internal id of the new department.
        """
        employee, error = self._employee(employee_id)
        if error:
            return error
        dept = self.departments.get(department_id)
        if dept is None:
            return {"success": False, "error": f"Department id '{department_id}' not found."}
        if employee["status"] != "active":
            return {"success": False, "error": f"Employee is {employee['status']}."}
        if employee["department_id"] == department_id:
            return {"success": False, "error": "Employee is already in that department."}
        employee["department_id"] = department_id
        employee["manager_id"] = dept["head_id"]
        return {"success": True, "data": {"employee_id": employee_id, **employee}}

    def update_salary(self, employee_id: str, new_salary: int) -> dict:
        """Raise an employee's yearly salary (at most 15% above the current one).

        Args:
            employee_id: Internal employee id.
            new_salary: New yearly salary.
        """
        employee, error = self._employee(employee_id)
        if error:
            return error
        if new_salary <= employee["salary"]:
            return {"success": False, "error": f"New salary must exceed the current {employee['salary']}."}
        if new_salary > employee["salary"] * (1 + self.MAX_RAISE) + 1e-6:
            return {"success": False, "error": f"A raise may be at most 15% (max {employee['salary'] * 1.15:.0f})."}
        employee["salary"] = new_salary
        return {"success": True, "data": {"employee_id": employee_id, "salary": new_salary}}

    def update_title(self, employee_id: str, title: str) -> dict:
        """Change an employee's job title.

        Args:
            employee_id: Internal employee id.
            title: New job title.
        """
        employee, error = self._employee(employee_id)
        if error:
            return error
        if not title.strip():
            return {"success": False, "error": "Title must not be empty."}
        employee["title"] = title.strip()
        return {"success": True, "data": {"employee_id": employee_id, "title": employee["title"]}}
