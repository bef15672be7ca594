import copy
from typing import Optional


class CourseRegistrar:
    """Registrar's office for one term: students (known by student number) with completed courses and
    a credit limit, and courses (known by code or title) with capacity, prerequisites, enrolled
    students and a waiting list.

    Rules:
    - Enrolling needs an active student, a free seat, every prerequisite among the student's completed
      courses, a course not already completed, and total enrolled credits within max_credits.
      Enrolling takes the student off the course's waiting list.
    - Only a full course has a waiting list; a student joins it at most once.
    - A grade (A, B, C, D or F) can only be recorded for an enrolled student; it ends the enrolment,
      and a grade other than F adds the course to the student's completed courses.
    - A credit overload may raise max_credits up to 21.
    """

    PASSING = ("A", "B", "C", "D")
    MAX_OVERLOAD = 21

    def __init__(self, init_config: Optional[dict] = None):
        self.students = {}
        self.courses = {}
        for key, value in (init_config or {}).items():
            setattr(self, key, copy.deepcopy(value))

    def _student(self, student_id):
        student = self.students.get(student_id)
        if student is None:
            return None, {"success": False, "error": f"Student id '{student_id}' not found."}
        return student, None

    def _course(self, course_id):
        course = self.courses.get(course_id)
        if course is None:
            return None, {"success": False, "error": f"Course id '{course_id}' not found."}
        return course, None

    def _credits(self, student_id):
        return sum(c["credits"] for c in self.courses.values() if student_id in c["enrolled"])

    # -- query tools --

    def find_student(self, student_number: str) -> dict:
        """Look up a student by student number (completed courses, grades and credit limit included).

        Args:
            student_number: Student number, e.g. 'S2023017'.
        """
        for sid, student in self.students.items():
            if student["student_number"] == student_number.strip().upper():
                return {"success": True, "data": {"student_id": sid, **student}}
        return {"success": False, "error": f"No student with number '{student_number}'."}

    def get_student(self, student_id: str) -> dict:
        """Get a student's record by internal id (e.g. one seen on a waiting list).

        Args:
            student_id: Internal student id.
        """
        student, error = self._student(student_id)
        if error:
            return error
        return {"success": True, "data": {"student_id": student_id, **student}}

    def search_courses(self, query: str) -> dict:
        """Search courses by code or title (case-insensitive substring); shows seats, prerequisites and waiting list.

        Args:
            query: Part of a course code or title, e.g. 'CS201' or 'algebra'.
        """
        needle = query.strip().lower()
        found = [{"course_id": cid, **c, "seats_left": c["capacity"] - len(c["enrolled"])}
                 for cid, c in self.courses.items() if needle in c["code"].lower() or needle in c["title"].lower()]
        if not found:
            return {"success": False, "error": f"No course matches '{query}'."}
        return {"success": True, "data": found}

    def list_enrollments(self, student_id: str) -> dict:
        """List the courses a student is enrolled in this term and their total credits.

        Args:
            student_id: Internal student id.
        """
        student, error = self._student(student_id)
        if error:
            return error
        courses = [{"course_id": cid, "code": c["code"], "title": c["title"], "credits": c["credits"]}
                   for cid, c in self.courses.items() if student_id in c["enrolled"]]
        return {"success": True, "data": {"courses": courses, "total_credits": self._credits(student_id),
                                          "max_credits": student["max_credits"]}}

    # -- modification tools --

    def enroll_student(self, student_id: str, course_id: str) -> dict:
        """Enroll a student in a course.

        Args:
            student_id: Internal student id.
            course_id: Internal course id.
        """
        student, error = self._student(student_id)
        if error:
            return error
        course, error = self._course(course_id)
        if error:
            return error
        if student["status"] != "active":
            return {"success": False, "error": f"Student is {student['status']}."}
        if student_id in course["enrolled"]:
            return {"success": False, "error": "Student is already enrolled."}
        if course["code"] in student["completed"]:
            return {"success": False, "error": f"Student already completed {course['code']}."}
        missing = [p for p in course["prerequisites"] if p not in student["completed"]]
        if missing:
            return {"success": False, "error": f"Missing prerequisites: {missing}."}
        if len(course["enrolled"]) >= course["capacity"]:
            return {"success": False, "error": f"{course['code']} is full; the student can join the waiting list."}
        total = self._credits(student_id) + course["credits"]
        if total > student["max_credits"]:
            return {"success": False, "error": f"That makes {total} credits; the limit is {student['max_credits']}."}
        course["enrolled"].append(student_id)
        if student_id in course["waitlist"]:
            course["waitlist"].remove(student_id)
        return {"success": True, "data": {"course_id": course_id, "code": course["code"], "total_credits": total}}

    def drop_course(self, student_id: str, course_id: str) -> dict:
        """Remove a student from a course they are enrolled in.

        Args:
            student_id: Internal student id.
            course_id: Internal course id.
        """
        student, error = self._student(student_id)
        if error:
            return error
        course, error = self._course(course_id)
        if error:
            return error
        if student_id not in course["enrolled"]:
            return {"success": False, "error": f"Student is not enrolled in {course['code']}."}
        course["enrolled"].remove(student_id)
        return {"success": True, "data": {"course_id": course_id,
                                          "seats_left": course["capacity"] - len(course["enrolled"]),
                                          "waitlist": course["waitlist"]}}

    def join_waitlist(self, student_id: str, course_id: str) -> dict:
        """Put a student at the end of a full course's waiting list.

        Args:
            student_id: Internal student id.
            course_id: Internal course id.
        """
        student, error = self._student(student_id)
        if error:
            return error
        course, error = self._course(course_id)
        if error:
            return error
        if len(course["enrolled"]) < course["capacity"]:
            return {"success": False, "error": f"{course['code']} has free seats; enroll instead."}
        if student_id in course["waitlist"] or student_id in course["enrolled"]:
            return {"success": False, "error": "Student is already enrolled or waiting."}
        course["waitlist"].append(student_id)
        return {"success": True, "data": {"course_id": course_id, "position": len(course["waitlist"])}}

    def record_grade(self, student_id: str, course_id: str, grade: str) -> dict:
        """Record a final grade for an enrolled student; this ends the enrolment.

        Args:
            student_id: Internal student id.
            course_id: Internal course id.
            grade: A, B, C, D or F.
        """
        student, error = self._student(student_id)
        if error:
            return error
        course, error = self._course(course_id)
        if error:
            return error
        grade = grade.strip().upper()
        if grade not in self.PASSING + ("F",):
            return {"success": False, "error": "Grade must be A, B, C, D or F."}
        if student_id not in course["enrolled"]:
            return {"success": False, "error": f"Student is not enrolled in {course['code']}."}
        course["enrolled"].remove(student_id)
        student["grades"][course["code"]] = grade
        if grade in self.PASSING and course["code"] not in student["completed"]:
            student["completed"].append(course["code"])
        return {"success": True, "data": {"student_id": student_id, "grades": student["grades"],
                                          "completed": student["completed"]}}

    def approve_credit_overload(self, student_id: str, max_credits: int) -> dict:
        """Raise a student's credit limit for the term (up to 21).

        Args:
            student_id: Internal student id.
            max_credits: New credit limit.
        """
        student, error = self._student(student_id)
        if error:
            return error
        if not student["max_credits"] < max_credits <= self.MAX_OVERLOAD:
            return {"success": False, "error": f"New limit must be above {student['max_credits']} "
                                               f"and at most {self.MAX_OVERLOAD}."}
        student["max_credits"] = max_credits
        return {"success": True, "data": {"student_id": student_id, "max_credits": max_credits}}
